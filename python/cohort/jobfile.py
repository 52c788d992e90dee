"""Job files on the client side (standard library only): what ``Client.submit`` and
``cohort.run`` take as a job, and the snapshot of a workdir that ``submit`` uploads.

A job is a dict (the job file's fields), the text of a job file (YAML or JSON), or the path of
one (``job.yaml``, ``job.json``). ``load_job`` reads it and makes its ``workdir`` and local
``inputs[].source`` absolute, as ``cohort submit -f`` does: against the file's directory for a
file, against the current directory otherwise. YAML is read with PyYAML when it is installed;
without it, only a job file's top-level ``workdir:`` line is looked at, and the text goes to the
server (or to ``cohort run``), which reads the rest.

``write_snapshot`` writes the workdir as a ustar archive, the format the server accepts: what
the workdir's ``.cohortignore`` (else its ``.gitignore``) names is left out (gitignore's
patterns: ``*``, ``?``, ``[...]``, ``**/``, a trailing ``/`` for directories, a leading or inner
``/`` anchors, ``!`` takes a file back), ``.git`` always. A link whose target leads out of the
workdir, a socket, FIFO or device, and more than ``max_bytes`` are refused with a message that
says what to do.
"""

import copy
import io
import json
import os
import re
import stat
import tarfile
from typing import Any, Dict, List, Optional, Tuple, Union

try:
    import yaml as _yaml
except ImportError:  # pragma: no cover - depends on the machine
    _yaml = None

__all__ = ["load_job", "IgnoreRules", "write_snapshot", "Snapshot"]

_JOB_SUFFIXES = (".yaml", ".yml", ".json")
_WORKDIR_LINE = re.compile(r"^workdir:[ \t]*(?P<value>[^#\n]*?)[ \t]*(#.*)?$", re.MULTILINE)


class JobFileError(ValueError):
    """A job that cannot be read: the message names the file and the cause."""


def _looks_like_path(job: str) -> bool:
    return "\n" not in job and (job.endswith(_JOB_SUFFIXES) or os.path.isfile(job))


def _absolute(path: str, base: str) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _fix_paths(job: Dict[str, Any], base: str) -> Dict[str, Any]:
    job = copy.deepcopy(job)
    workdir = job.get("workdir")
    if workdir is None or isinstance(workdir, str):
        job["workdir"] = _absolute(workdir or ".", base)
    for item in job.get("inputs") or []:
        source = item.get("source") if isinstance(item, dict) else None
        if isinstance(source, str) and source and "://" not in source:
            item["source"] = _absolute(source, base)
    return job


def load_job(job: Union[Dict[str, Any], str, "os.PathLike[str]"]) -> Tuple[Union[dict, str], str]:
    """Returns (the job as a dict, or as YAML text when PyYAML is missing; its absolute
    workdir). Raises JobFileError naming the file; OSError when it cannot be read."""
    base = os.getcwd()
    source = "job"
    if isinstance(job, os.PathLike) or (isinstance(job, str) and _looks_like_path(job)):
        path = os.path.abspath(os.path.expanduser(os.fspath(job)))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        base, source = os.path.dirname(path), "job file '%s'" % path
        if path.endswith(".json"):
            try:
                job = json.loads(text)
            except ValueError as e:
                raise JobFileError("%s: %s" % (source, e)) from None
        else:
            job = text
    if isinstance(job, str):
        stripped = job.lstrip()
        parsed = None
        if stripped.startswith("{"):
            try:
                parsed = json.loads(job)
            except ValueError as e:
                raise JobFileError("%s: %s" % (source, e)) from None
        elif _yaml is not None:
            try:
                parsed = _yaml.safe_load(job)
            except _yaml.YAMLError as e:
                raise JobFileError("%s: %s" % (source, e)) from None
        if parsed is None:
            # The server reads the YAML; only the workdir is needed here.
            found = _WORKDIR_LINE.search(job)
            value = found.group("value").strip().strip("'\"") if found else ""
            workdir = _absolute(value or ".", base)
            if found:
                job = job[:found.start("value")] + json.dumps(workdir) + job[found.end("value"):]
            else:
                job = "workdir: %s\n%s" % (json.dumps(workdir), job)
            return job, workdir
        job = parsed
    if not isinstance(job, dict):
        raise JobFileError("%s: not a mapping of fields (a job file is name:, command:, ...)" %
                           source)
    job = _fix_paths(job, base)
    return job, job["workdir"]


# --- snapshots ---


def _glob_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out) + r"\Z"


class IgnoreRules:
    """What a snapshot leaves out; the same rules as ``cohort submit`` (see the module)."""

    def __init__(self, text: str = "", source: str = ""):
        self.source = source
        self._rules = []  # (regex, negate, dir_only, anchored)
        for line in text.splitlines():
            line = line.rstrip("\r")
            while line.endswith(" ") and not line.endswith("\\ "):
                line = line[:-1]
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            elif line.startswith(("\\#", "\\!")):
                line = line[1:]
            dir_only = line.endswith("/")
            if dir_only:
                line = line[:-1]
            anchored = "/" in line
            if line.startswith("/"):
                line = line[1:]
            if line:
                self._rules.append((re.compile(_glob_regex(line)), negate, dir_only, anchored))

    @classmethod
    def for_tree(cls, root: str) -> "IgnoreRules":
        for name in (".cohortignore", ".gitignore"):
            path = os.path.join(root, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    return cls(f.read(), path)
            except FileNotFoundError:
                continue
        return cls()

    def ignored(self, rel: str, is_dir: bool) -> bool:
        if rel == ".git" or rel.startswith(".git/"):
            return True
        base = rel.rsplit("/", 1)[-1]
        out = False
        for regex, negate, dir_only, anchored in self._rules:
            if (dir_only and not is_dir) or out != negate:
                continue
            if regex.match(rel if anchored else base):
                out = not negate
        return out


def _link_problem(target: str, depth: int) -> str:
    if not target:
        return "its target is empty"
    if target.startswith("/"):
        return "its target '%s' is an absolute path" % target
    up, below = 0, False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if below:
                return "its target '%s' has '..' after a name" % target
            up += 1
            if up > depth:
                return "its target '%s' leads out of the workdir" % target
        else:
            below = True
    return ""


class Snapshot:
    """A workdir archived: ``file`` (a binary file, at its start), ``size`` (bytes of the
    archive), ``files`` and ``bytes`` (of the files in it), ``ignore_file`` (what was read)."""

    def __init__(self, file, size: int, files: int, nbytes: int, ignore_file: str):
        self.file, self.size, self.files, self.bytes = file, size, files, nbytes
        self.ignore_file = ignore_file


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" or n >= 100 else "%.1f %s") % (n, unit)
        n /= 1024.0
    return "%.0f B" % n


def write_snapshot(workdir: str, out, max_bytes: int) -> Snapshot:
    """Archives ``workdir`` into the binary file ``out``. Raises ValueError (what cannot be
    uploaded, naming the path) and OverflowError (over ``max_bytes``, naming the biggest
    files and how to leave them out)."""
    rules = IgnoreRules.for_tree(workdir)
    entries = []  # (rel, path, lstat)
    total, files = 0, 0

    def walk(rel_dir: str, depth: int):
        nonlocal total, files
        path_dir = os.path.join(workdir, rel_dir) if rel_dir else workdir
        for name in sorted(os.listdir(path_dir)):
            rel = rel_dir + "/" + name if rel_dir else name
            path = os.path.join(workdir, rel)
            st = os.lstat(path)
            is_dir = stat.S_ISDIR(st.st_mode)
            if rules.ignored(rel, is_dir):
                continue
            if stat.S_ISLNK(st.st_mode):
                why = _link_problem(os.readlink(path), depth)
                if why:
                    raise ValueError("the link '%s' cannot be uploaded: %s (the server refuses "
                                     "links that lead out of the workdir): leave it out with "
                                     ".cohortignore, or copy what it points to into the "
                                     "workdir" % (path, why))
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                files += 1
            elif not is_dir:
                raise ValueError("'%s' is a socket, FIFO or device, which cannot be uploaded: "
                                 "leave it out with .cohortignore" % path)
            entries.append((rel, path, st))
            if is_dir:
                walk(rel, depth + 1)

    if not os.path.isdir(workdir):
        raise ValueError("the workdir '%s' is not a directory" % workdir)
    walk("", 0)
    if total > max_bytes:
        biggest = sorted((e for e in entries if stat.S_ISREG(e[2].st_mode)),
                         key=lambda e: -e[2].st_size)[:3]
        note = ("add patterns to " + rules.source if rules.source
                else "add a .cohortignore (gitignore patterns) to the workdir")
        raise OverflowError(
            "the workdir '%s' holds %s in %d files to upload, over the %s limit; the biggest: "
            "%s: leave files out (%s; put data in the store and name it in inputs), or raise "
            "the limit with max_upload=BYTES" % (
                workdir, _size(total), files, _size(max_bytes),
                ", ".join("%s (%s)" % (e[0], _size(e[2].st_size)) for e in biggest), note))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for rel, path, st in entries:
            info = tar.gettarinfo(path, arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if (stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111) else 0o644
            try:
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
            except ValueError as e:  # a name too long for ustar
                raise ValueError("'%s' cannot be uploaded: %s: rename it, or leave it out "
                                 "with .cohortignore" % (path, e)) from None
    size = out.tell()
    out.seek(0)
    return Snapshot(out, size, files, total, rules.source)
