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

A graceful stop (``cohort stop``, Ctrl-C, ``policy.max_runtime``, a cluster that preempts the
job, a failure elsewhere, a hang) sends every rank ``policy.stop_signal`` (SIGTERM unless the
job says otherwise, named in ``COHORT_STOP_SIGNAL``) once, then SIGKILL ``policy.grace_period``
later: ``stop_requested()`` and ``on_stop()`` turn it into a "checkpoint now" notice.
``heartbeat()`` tells ``policy.hang_timeout`` that the rank is alive without printing.

    while not cohort.stop_requested():
        train_one_step()
        cohort.heartbeat()
    save_checkpoint()

From a notebook or any Python program, ``cohort.run(...)`` runs a local distributed job with
its ranks' lines streaming into the output and returns how it ended (cohort/local.py;
``%load_ext cohort`` adds the ``%%cohort`` cell magic), and ``cohort.Client`` drives a
``cohort server`` (cohort/client.py): ``Client().submit(result.job)`` sends the same job there.
"""

import os
import re
import shutil
import signal
import subprocess
import time
from typing import Callable, List, Optional

from cohort._version import __version__
from cohort.client import (Client, CodeUpload, CohortError, Conflict, Forbidden, InvalidArgument,
                           Job, JobRecord, NotFound, RootCause, ServerError, StoreFile, TooLarge,
                           Unauthenticated, Unavailable)
from cohort.local import JobFailed, RunResult, load_ipython_extension, run, script_job

__all__ = ["rank", "world_size", "local_rank", "is_main", "output_dir", "copy", "cohort_binary",
           "log", "heartbeat", "stop_signal", "stop_requested", "on_stop", "Client", "CohortError",
           "Job", "JobRecord", "RootCause", "StoreFile", "CodeUpload", "InvalidArgument",
           "Unauthenticated", "Forbidden", "NotFound", "Conflict", "TooLarge", "Unavailable",
           "ServerError", "run", "RunResult", "JobFailed", "script_job", "load_ipython_extension",
           "__version__"]


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


_heartbeat_at = 0.0
_HEARTBEAT_EVERY = 0.25  # seconds; the agents look every 2 s


def heartbeat() -> None:
    """Says that this rank is alive, for ``policy.hang_timeout``, without printing anything.

    Call it from a loop that makes progress but prints little (a long epoch, a rank that never
    logs). It touches the rank's file, ``COHORT_HEARTBEAT_FILE``, whose change the node's agent
    notices (every 2 s, like output); calls closer together than a quarter second touch it once.
    Outside cohort (no ``COHORT_HEARTBEAT_FILE``) it does nothing. Never raises: a heartbeat
    that could not be written is only a missed heartbeat."""
    global _heartbeat_at
    path = os.environ.get("COHORT_HEARTBEAT_FILE")
    now = time.monotonic()
    if not path or (_heartbeat_at and now - _heartbeat_at < _HEARTBEAT_EVERY):
        return
    _heartbeat_at = now
    try:
        with open(path, "ab"):
            pass
        os.utime(path)
    except OSError:
        pass


def stop_signal() -> signal.Signals:
    """The signal a graceful stop sends this rank: ``COHORT_STOP_SIGNAL`` (``policy.stop_signal``),
    SIGTERM outside cohort."""
    name = os.environ.get("COHORT_STOP_SIGNAL", "").strip().upper() or "SIGTERM"
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return signal.Signals[name]
    except KeyError:
        raise RuntimeError("COHORT_STOP_SIGNAL=%r is not a signal" % name) from None


_stop_received = False
_stop_callbacks = []  # type: List[Callable[[], None]]
_stop_installed = False


def _on_stop_signal(signum, frame):
    global _stop_received
    if _stop_received:
        return  # cohort sends it once; a second one from elsewhere changes nothing
    _stop_received = True
    callbacks = list(_stop_callbacks)
    _stop_callbacks.clear()
    for callback in callbacks:
        callback()


def _install_stop_handler() -> None:
    global _stop_installed
    if not _stop_installed:
        signal.signal(stop_signal(), _on_stop_signal)
        _stop_installed = True


def stop_requested() -> bool:
    """True once the job is being stopped: the stop signal has arrived, and SIGKILL follows
    ``policy.grace_period`` after it. Save a checkpoint and exit.

    The first call installs a handler for the stop signal (from the main thread, as Python
    requires), so that the signal no longer ends the script: call it once before the work
    starts, e.g. as the condition of the training loop."""
    _install_stop_handler()
    return _stop_received


def on_stop(callback: Callable[[], None]) -> None:
    """Calls ``callback()`` once, in the main thread, when the stop signal arrives (at once if
    it already has); the script goes on after it returns, so the callback may save a checkpoint
    and exit (``sys.exit(0)``), or set a flag the training loop reads. Installs the handler as
    ``stop_requested()`` does; call it from the main thread."""
    _install_stop_handler()
    if _stop_received:
        callback()
    else:
        _stop_callbacks.append(callback)


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
