"""Helpers for training scripts started by ``cohort run`` (standard library only).

A rank learns who it is from the variables cohort sets (``COHORT_RANK``, ``COHORT_WORLD_SIZE``,
``COHORT_LOCAL_RANK``, ``COHORT_OUTPUT_DIR``); the torchrun names (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``) are read when cohort's are absent, and a script started by hand is rank 0 of 1.
``copy`` is the one-line parallel copy (the equivalent of a managed service's
``mox.file.copy_parallel(src, dst)``): it runs ``cohort cp`` and raises ``RuntimeError`` with
cohort's message when the copy fails.

    import cohort
    cohort.copy("store://datasets/mnist", "/tmp/mnist")
    ...
    if cohort.is_main():
        torch.save(model.state_dict(), os.path.join(cohort.output_dir(), "model.pt"))
"""

import os
import re
import shutil
import subprocess
from typing import Optional

from cohort.client import Client, CohortError, Job

__all__ = ["rank", "world_size", "local_rank", "is_main", "output_dir", "copy", "cohort_binary",
           "log", "Client", "CohortError", "Job"]


def _int_env(names, default):
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise RuntimeError("%s=%r is not a number" % (name, value)) from None
    return default


def rank() -> int:
    """This process's global rank (COHORT_RANK, else RANK, else 0)."""
    return _int_env(("COHORT_RANK", "RANK"), 0)


def world_size() -> int:
    """The number of ranks in the job (COHORT_WORLD_SIZE, else WORLD_SIZE, else 1)."""
    return _int_env(("COHORT_WORLD_SIZE", "WORLD_SIZE"), 1)


def local_rank() -> int:
    """This process's rank on its node (COHORT_LOCAL_RANK, else LOCAL_RANK, else 0)."""
    return _int_env(("COHORT_LOCAL_RANK", "LOCAL_RANK"), 0)


def is_main() -> bool:
    """True on rank 0, the rank that should write checkpoints and logs once."""
    return rank() == 0


def output_dir() -> str:
    """The job's output directory (COHORT_OUTPUT_DIR, else ./output), created if missing.

    cohort copies it out when the job ends."""
    path = os.environ.get("COHORT_OUTPUT_DIR") or os.path.join(os.getcwd(), "output")
    os.makedirs(path, exist_ok=True)
    return path


_METRIC_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}\Z")


def log(step: Optional[int] = None, **metrics: float) -> None:
    """Reports training metrics: ``cohort.log(step=120, loss=0.42, accuracy=0.91)``.

    Prints one line, ``cohort.log step=120 loss=0.42 accuracy=0.91``, which cohort records
    with the rank and the time in the job's metrics.jsonl (``cohort top JOB`` shows the
    latest); it also counts as progress for ``policy.hang_timeout``. Keys are letters, digits
    and ``_ . / -`` (at most 64 characters, not ``t`` or ``rank``); values are numbers
    (a tensor's ``.item()``). Raises ValueError for anything else."""
    if not metrics:
        raise ValueError("cohort.log: give at least one metric, e.g. cohort.log(loss=0.5)")
    parts = ["cohort.log"]
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError("cohort.log: step must be an int, got %r" % (step,))
        parts.append("step=%d" % step)
    for key, value in metrics.items():
        if not _METRIC_KEY.match(key) or key in ("t", "rank", "step"):
            raise ValueError("cohort.log: %r is not a metric name" % key)
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("cohort.log: %s must be a number, got %r" % (key, value))
        parts.append("%s=%r" % (key, float(value)))
    print(" ".join(parts), flush=True)


def cohort_binary() -> str:
    """The ``cohort`` executable: COHORT_BIN, else ``cohort`` on PATH."""
    path = os.environ.get("COHORT_BIN") or shutil.which("cohort")
    if not path:
        raise RuntimeError("cohort: the cohort binary was not found: set COHORT_BIN or put "
                           "cohort on PATH")
    return path


def copy(src: str, dst: str, workers: Optional[int] = None, checksum: bool = False,
         data_root: Optional[str] = None) -> None:
    """Copies a file or a directory tree in parallel with ``cohort cp``, verifying every file.

    ``src`` and ``dst`` are local paths or ``store://bucket/path``. A directory's contents are
    copied into ``dst``; files already identical there are skipped, so calling it again after
    an interruption finishes the copy. Raises RuntimeError with cohort's message on failure."""
    args = [cohort_binary(), "cp", "-q"]
    if workers is not None:
        args += ["--workers", str(workers)]
    if checksum:
        args.append("--checksum")
    if data_root is not None:
        args += ["--data-root", os.fspath(data_root)]
    args += ["--", os.fspath(src), os.fspath(dst)]
    try:
        done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, check=False)
    except OSError as e:
        raise RuntimeError("cohort: cannot run %s: %s" % (args[0], e)) from None
    if done.returncode != 0:
        message = done.stderr.strip() or "cohort cp exited with code %d" % done.returncode
        prefix = "cohort: error: "
        lines = [line[len(prefix):] if line.startswith(prefix) else line
                 for line in message.splitlines()]
        raise RuntimeError("\n".join(lines))
