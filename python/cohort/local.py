"""Running a distributed job on this machine from Python or a notebook cell (standard library
only): ``cohort.run`` starts ``cohort run`` (the binary: COHORT_BIN, else ``cohort`` on PATH),
streams every rank's lines, prefixed ``[role/rank node]``, into the output as they come (in a
notebook: into the cell), and returns a ``RunResult`` read from the job's ``result.json``: its
state, exit code and root cause as Python objects.

    import cohort
    result = cohort.run("train.py", nodes=2, nproc_per_node=2)        # a script
    result = cohort.run("examples/pytorch/ddp.yaml")                  # a job file
    result = cohort.run(train, nodes=2)                               # a function
    result.ok, result.exit_code, result.root_cause
    result.returns                                  # what the function returned, by rank

``result.job`` is the job file it ran, as a dict: ``Client().submit(result.job)`` submits the
same job to a server. In IPython, ``%load_ext cohort`` adds the ``%%cohort`` cell magic, which
runs the cell as the ranks' script (``%%cohort --nodes 2 --nproc-per-node 2``).
"""

import dataclasses
import inspect
import json
import os
import pickle
import re
import selectors
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from cohort import jobfile
from cohort.client import (CohortError, InvalidArgument, RootCause, _Record, make_error)

__all__ = ["run", "RunResult", "JobFailed", "script_job", "load_ipython_extension"]

_SCRIPTS_DIR = ".cohort-cells"  # in the workdir, so that a submitted job carries them
_RETURNS_DIR = ".cohort-returns"  # in the job's output directory: a function's values, by rank
_JOB_DIR_LINE = re.compile(r"^cohort: job directory (.+)$")
_ERROR_PREFIX = "cohort: error: "


class JobFailed(CohortError):
    """``run(..., check=True)`` of a job that did not succeed; ``result`` is its RunResult."""

    def __init__(self, result: "RunResult"):
        cause = " (%s)" % str(result.root_cause).splitlines()[0] if result.root_cause else ""
        super().__init__("failed_precondition", "job %s %s with exit code %d: %s%s" % (
            result.job_id, result.state, result.exit_code, result.reason, cause))
        self.result = result

    def __reduce__(self):
        return (CohortError, (self.code, self.message, self.status))


@dataclasses.dataclass(eq=False)
class RunResult(_Record):
    """How a local job ended (its result.json): ``state`` (succeeded, failed, stopped),
    ``exit_code`` (what ``cohort run`` exits with), ``reason``, ``root_cause`` (a RootCause,
    None when it succeeded), ``attempts``, ``outputs`` (where outputs were copied); and where it
    lives: ``job_dir``, ``output_dir``, ``logs_dir``. ``job`` is the job file it ran (a dict, or
    its text), ready for ``Client.submit``."""

    job_id: str = ""
    name: str = ""
    state: str = ""
    exit_code: int = 1
    reason: str = ""
    attempts: int = 0
    root_cause: Optional[RootCause] = None
    outputs: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0
    job_dir: str = ""
    job: Union[Dict[str, Any], str, None] = dataclasses.field(default=None, repr=False)
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.state == "succeeded"

    @property
    def output_dir(self) -> str:
        return os.path.join(self.job_dir, "output")

    @property
    def logs_dir(self) -> str:
        return os.path.join(self.job_dir, "logs")

    @property
    def returns(self) -> List[Any]:
        """What the function that ``cohort.run`` ran returned on each rank, by global rank
        (None where it returned None or did not return); empty for a script or a job file.
        Each rank pickled its value into the job's output directory (.cohort-returns/)."""
        directory = os.path.join(self.output_dir, _RETURNS_DIR)
        try:
            names = os.listdir(directory)
        except OSError:
            return []
        found = {}
        for entry in names:
            matched = re.match(r"^rank-(\d+)\.pickle$", entry)
            if matched:
                with open(os.path.join(directory, entry), "rb") as f:
                    found[int(matched.group(1))] = pickle.load(f)
        ranks = _world_size(self.job) or (max(found) + 1 if found else 0)
        return [found.get(rank) for rank in range(ranks)]

    def log(self, role: str = "worker", index: int = 0) -> str:
        """One process's whole log (logs/<role>-<index>.log)."""
        with open(os.path.join(self.logs_dir, "%s-%d.log" % (role, index)),
                  encoding="utf-8", errors="replace") as f:
            return f.read()


def script_job(script: str, args: Sequence[str] = (), python: Optional[str] = None,
               workdir: Optional[str] = None, name: Optional[str] = None, nodes: int = 1,
               nproc_per_node: int = 1, framework: str = "pytorch",
               env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The job file (a dict) that runs ``python script args...`` on every rank, with the
    workdir (default: the current directory) as the code."""
    workdir = os.path.abspath(workdir or os.getcwd())
    rel = os.path.relpath(os.path.abspath(os.path.join(workdir, script)), workdir)
    if rel.startswith(".."):
        raise InvalidArgument("invalid_argument", "script '%s' is not inside the workdir '%s': "
                              "a submitted job carries only its workdir" % (script, workdir))
    job = {
        "name": name or os.path.splitext(os.path.basename(script))[0],
        "framework": framework,
        "workdir": workdir,
        "command": [python or sys.executable, rel] + [str(a) for a in args],
        "roles": {"worker": {"nodes": int(nodes), "procs_per_node": int(nproc_per_node)}},
        "env": dict({"PYTHONUNBUFFERED": "1"}, **(env or {})),
    }
    return job


def _write_script(workdir: str, name: str, source: str) -> str:
    """Writes a cell's or a function's source under the workdir; returns its relative path."""
    directory = os.path.join(workdir, _SCRIPTS_DIR)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, re.sub(r"[^A-Za-z0-9_.-]", "-", name) + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return os.path.relpath(path, workdir)


def _function_source(fn: Callable, args: Sequence[Any]) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise InvalidArgument("invalid_argument", "cohort.run: the source of %r cannot be read "
                              "(%s): define it in a file or a notebook cell" % (fn, e)) from None
    call_args = ", ".join(repr(a) for a in args)
    return ("# Written by cohort.run from the function %s: each rank runs it, and keeps what\n"
            "# it returns for RunResult.returns.\n%s\n\n"
            "if __name__ == \"__main__\":\n"
            "    _value = %s(%s)\n"
            "    if _value is not None:\n"
            "        import os as _os, pickle as _pickle\n"
            "        _dir = _os.environ.get(\"COHORT_OUTPUT_DIR\") or \"output\"\n"
            "        _dir = _os.path.join(_dir, %r)\n"
            "        _os.makedirs(_dir, exist_ok=True)\n"
            "        with open(_os.path.join(_dir, \"rank-%%s.pickle\" %% "
            "_os.environ.get(\"COHORT_RANK\", \"0\")), \"wb\") as _f:\n"
            "            _pickle.dump(_value, _f)\n" % (fn.__name__, source, fn.__name__,
                                                      call_args, _RETURNS_DIR))


def _world_size(job) -> int:
    """The number of ranks of a job file given as a dict (0 when it cannot say)."""
    if not isinstance(job, dict):
        return 0
    roles = job.get("roles") or {}
    try:
        return sum(int((r or {}).get("nodes", 1)) * int((r or {}).get("procs_per_node", 1))
                   for r in roles.values())
    except (TypeError, ValueError, AttributeError):
        return 0


def _stream(process: subprocess.Popen, out, err) -> List[str]:
    """Copies the process's stdout to ``out`` and its stderr to ``err`` a line at a time, as
    they come, from this thread (a notebook shows them in the running cell); returns cohort's
    own lines (stderr). Ctrl-C is passed on: the first stops the job gracefully."""
    selector = selectors.DefaultSelector()
    buffers = {}
    for pipe, sink in ((process.stdout, out), (process.stderr, err)):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe, selectors.EVENT_READ, sink)
        buffers[pipe] = b""
    cohort_lines = []

    def emit(sink, raw: bytes, pipe):
        line = raw.decode("utf-8", errors="replace")
        sink.write(line)
        sink.flush()
        if pipe is process.stderr:
            cohort_lines.append(line.rstrip("\n"))

    while selector.get_map():
        try:
            events = selector.select()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)  # cohort stops every rank, then writes the result
            continue
        for key, _ in events:
            pipe, sink = key.fileobj, key.data
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                selector.unregister(pipe)
                if buffers[pipe]:
                    emit(sink, buffers[pipe] + b"\n", pipe)
                continue
            data = buffers[pipe] + chunk
            *lines, buffers[pipe] = data.split(b"\n")
            for line in lines:
                emit(sink, line + b"\n", pipe)
    return cohort_lines


def run(job: Union[str, Dict[str, Any], Callable, "os.PathLike[str]"], *args: Any,
        nodes: Optional[int] = None, nproc_per_node: Optional[int] = None,
        name: Optional[str] = None, python: Optional[str] = None,
        env: Optional[Dict[str, str]] = None, workdir: Optional[str] = None,
        flags: Sequence[str] = (), data_root: Optional[str] = None, check: bool = False,
        stdout=None, stderr=None) -> RunResult:
    """Runs a distributed job on this machine with ``cohort run`` and returns how it ended.

    ``job`` is a job file (a path ending in .yaml/.yml/.json, a dict, or YAML/JSON text), a
    Python script (a path ending in .py, run with ``python``, default this interpreter, and
    ``args``), or a function (its source becomes the ranks' script, called with ``args``; it
    must import what it uses). ``nodes``, ``nproc_per_node``, ``name`` and ``env`` set those
    fields (for a job file they override it, as cohort run's flags do); ``flags`` are more of
    cohort run's flags (``["--max-runtime", "5m"]``).

    Every rank's lines stream to ``stdout`` (sys.stdout) and cohort's to ``stderr``
    (sys.stderr) while the job runs; Ctrl-C (interrupting the cell) stops the job gracefully.
    A job that ran returns its RunResult, failed or not (``check=True`` raises JobFailed when
    it did not succeed); a job that could not start (a bad job file, a missing script) raises
    InvalidArgument with cohort's message."""
    from cohort import cohort_binary

    out = stdout or sys.stdout
    err = stderr or sys.stderr
    job_file_path = None
    overrides: List[str] = []
    if callable(job) and not isinstance(job, (str, os.PathLike)):
        base = os.path.abspath(workdir or os.getcwd())
        script = _write_script(base, name or job.__name__, _function_source(job, args))
        spec = script_job(script, python=python, workdir=base, name=name or job.__name__,
                          nodes=nodes or 1, nproc_per_node=nproc_per_node or 1, env=env)
    elif isinstance(job, (str, os.PathLike)) and os.fspath(job).endswith(".py"):
        spec = script_job(os.fspath(job), args, python=python, workdir=workdir, name=name,
                          nodes=nodes or 1, nproc_per_node=nproc_per_node or 1, env=env)
    else:
        try:
            spec, _ = jobfile.load_job(job)
        except jobfile.JobFileError as e:
            raise InvalidArgument("invalid_argument", str(e)) from None
        if isinstance(spec, dict):
            if workdir:
                spec["workdir"] = os.path.abspath(workdir)
            if name:
                spec["name"] = name
            if env:
                spec["env"] = dict(spec.get("env") or {}, **env)
            roles = spec.get("roles") or {"worker": {}}
            if nodes is not None or nproc_per_node is not None:
                if len(roles) != 1:
                    raise InvalidArgument("invalid_argument", "nodes and nproc_per_node set a "
                                          "single-role job's; this one has roles %s" %
                                          ", ".join(roles))
                (role_name, role), = roles.items()
                role = dict(role or {})
                if nodes is not None:
                    role["nodes"] = int(nodes)
                if nproc_per_node is not None:
                    role["procs_per_node"] = int(nproc_per_node)
                spec["roles"] = {role_name: role}
        else:  # YAML text without PyYAML: cohort run reads it, the flags change it
            for flag, value in (("--nodes", nodes), ("--nproc-per-node", nproc_per_node),
                                ("--name", name), ("--workdir", workdir)):
                if value is not None:
                    overrides += [flag, str(value)]
            for key, value in (env or {}).items():
                overrides += ["--env", "%s=%s" % (key, value)]

    with tempfile.TemporaryDirectory(prefix="cohort-run-") as tmp:
        job_file_path = os.path.join(tmp, "job.json" if isinstance(spec, dict) else "job.yaml")
        with open(job_file_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(spec, indent=2) if isinstance(spec, dict) else spec)
        argv = [cohort_binary(), "run", "-f", job_file_path] + overrides + list(flags)
        if data_root is not None:
            argv += ["--data-root", os.fspath(data_root)]
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        except OSError as e:
            raise CohortError("unavailable", "cohort: cannot run %s: %s" % (argv[0], e)) from None
        with process:
            lines = _stream(process, out, err)
            code = process.wait()

    job_dir = next((m.group(1) for m in map(_JOB_DIR_LINE.match, lines) if m), None)
    if job_dir is None:
        errors = [line[len(_ERROR_PREFIX):] for line in lines if line.startswith(_ERROR_PREFIX)]
        message = "\n".join(errors) or "\n".join(lines[-5:]) or \
            "cohort run exited with code %d before the job started" % code
        raise make_error("invalid_argument" if code == 2 else "internal", message)
    try:
        with open(os.path.join(job_dir, "result.json"), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise CohortError("internal", "job directory %s: no result.json (%s); cohort run "
                          "exited with code %d" % (job_dir, e, code)) from None
    names = {f.name for f in dataclasses.fields(RunResult)} - {"raw", "root_cause", "job",
                                                               "job_dir"}
    result = RunResult(raw=record, job_dir=job_dir, job=spec,
                       root_cause=RootCause.from_dict(record.get("root_cause")),
                       **{k: v for k, v in record.items() if k in names})
    if check and not result.ok:
        raise JobFailed(result)
    return result


# --- IPython ---


def _magic_parser():
    import argparse

    parser = argparse.ArgumentParser(prog="%%cohort", add_help=True, description=(
        "Runs the cell as every rank's Python script, as a local distributed job (cohort run); "
        "the RunResult is the cell's value and is kept in the variable named by --out."))
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1)
    parser.add_argument("--name", default="cell")
    parser.add_argument("--python", default=None, help="the ranks' interpreter (default: the "
                        "kernel's)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default="cohort_result", help="the variable the RunResult "
                        "goes to (default cohort_result; its .job is the job file to submit)")
    parser.add_argument("--check", action="store_true", help="raise JobFailed unless it "
                        "succeeds")
    parser.add_argument("flags", nargs="*", help="more cohort run flags, after --")
    return parser


def cohort_cell(line: str, cell: str, user_ns: Optional[Dict[str, Any]] = None):
    """The ``%%cohort`` cell magic: the cell is written to .cohort-cells/<name>.py in the
    current directory (the job's workdir, so that a submitted job carries it) and run."""
    parser = _magic_parser()
    try:
        options = parser.parse_args(shlex.split(line))
    except SystemExit:  # argparse printed the usage or the help
        return None
    env = {}
    for item in options.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument("invalid_argument", "%%cohort --env: expected KEY=VALUE, got "
                                  "'%s'" % item)
        env[key] = value
    workdir = os.getcwd()
    script = _write_script(workdir, options.name, "# Written by %%%%cohort.\n%s\n" % cell)
    job = script_job(script, python=options.python, workdir=workdir, name=options.name,
                     nodes=options.nodes, nproc_per_node=options.nproc_per_node, env=env)
    result = run(job, flags=options.flags, check=options.check)
    if user_ns is not None and options.out:
        user_ns[options.out] = result
    return result


def load_ipython_extension(ipython) -> None:
    """``%load_ext cohort``: registers the ``%%cohort`` cell magic."""

    def magic(line, cell):
        return cohort_cell(line, cell, ipython.user_ns)

    magic.__doc__ = _magic_parser().format_help()
    ipython.register_magic_function(magic, magic_kind="cell", magic_name="cohort")
