"""The Python SDK of ``cohort server`` (standard library only): submit jobs, follow their logs,
fetch their outputs, share store prefixes. It speaks the HTTP API of docs/server-api.md.

    from cohort import Client
    c = Client("http://127.0.0.1:8600", token="cohort_...")
    job = c.submit({"name": "digits", "workdir": "/srv/code/digits",
                    "command": ["python3", "train.py"]})
    for line in job.logs(follow=True):
        print(line, end="")
    job.wait()
    job.download_outputs("./digits-out")

``submit`` takes the job file as a dict, as its YAML or JSON text, or as the path of job.yaml;
its ``workdir`` is uploaded as a snapshot (``.cohortignore``, else ``.gitignore``, leaves files
out) unless the server is on this machine, as ``cohort submit`` does. Job records come back as
``JobRecord`` (a dataclass that also reads like the record's dict: ``record["state"]``), a
failure's root cause as ``RootCause``.

Every failure is a ``CohortError`` with the server's ``status``, ``code`` and ``message``, of a
subclass for its kind: ``InvalidArgument`` (400), ``Unauthenticated`` (401), ``Forbidden``
(403), ``NotFound`` (404), ``Conflict`` (409), ``TooLarge`` (413), ``Unavailable`` (no answer,
502-504), ``ServerError`` (500). Local files that cannot be read or written raise the usual
``OSError``. A Client holds no connection between calls, so threads may share one.
"""

import codecs
import collections.abc
import dataclasses
import http.client
import json
import os
import re
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, List, Optional, Union

from cohort import jobfile

__all__ = ["Client", "Job", "JobRecord", "RootCause", "StoreFile", "CodeUpload", "CohortError",
           "InvalidArgument", "Unauthenticated", "Forbidden", "NotFound", "Conflict",
           "TooLarge", "Unavailable", "ServerError", "FINAL_STATES", "DEFAULT_MAX_UPLOAD"]

DEFAULT_MAX_UPLOAD = 256 << 20  # bytes of a workdir snapshot, as cohort submit's --max-upload

FINAL_STATES = frozenset(("succeeded", "failed", "stopped"))
# How long a follower (logs, wait, follow_events) waits for a server that went away (a restart)
# before it gives up, in seconds.
RESTART_WINDOW = 120.0

def _default_config_path() -> str:
    """Where ``cohort login`` writes: $XDG_CONFIG_HOME/cohort/config.json (~/.config by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join("~", ".config")
    return os.path.join(base, "cohort", "config.json")

# The code a response without cohort's JSON error body stands for (a proxy's 502, say).
_CODE_FOR_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "failed_precondition",
    413: "too_large",
    500: "internal",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


class CohortError(Exception):
    """A request that failed: ``status`` (the HTTP status, None when no answer came back),
    ``code`` (``not_found``, ``invalid_argument``, ``unavailable``, ...) and ``message``."""

    def __init__(self, code: str, message: str, status: Optional[int] = None):
        super().__init__(code, message, status)
        self.code = code
        self.message = message
        self.status = status

    def __str__(self):
        if self.status is None:
            return "%s (%s)" % (self.message, self.code)
        return "%s (HTTP %d %s)" % (self.message, self.status, self.code)

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.status))


class InvalidArgument(CohortError):
    """400: a bad job file, field or parameter (the message names it)."""


class Unauthenticated(CohortError):
    """401: no token, or one that is not valid (any more)."""


class Forbidden(CohortError):
    """403: the account may not do this."""


class NotFound(CohortError):
    """404: no such job, file or upload, or one of another account."""


class Conflict(CohortError):
    """409: the thing is not in a state that allows it (a job that still runs, a name taken)."""


class TooLarge(CohortError):
    """413: a body, a file or a workdir snapshot over a limit."""


class Unavailable(CohortError):
    """The server could not be reached, or answered 502-504."""


class ServerError(CohortError):
    """500: a bug in cohort (the message says what)."""


_CLASS_FOR_CODE = {
    "invalid_argument": InvalidArgument,
    "unauthenticated": Unauthenticated,
    "permission_denied": Forbidden,
    "not_found": NotFound,
    "already_exists": Conflict,
    "failed_precondition": Conflict,
    "too_large": TooLarge,
    "unavailable": Unavailable,
    "internal": ServerError,
}
_CLASS_FOR_STATUS = {400: InvalidArgument, 401: Unauthenticated, 403: Forbidden, 404: NotFound,
                     409: Conflict, 413: TooLarge, 500: ServerError, 502: Unavailable,
                     503: Unavailable, 504: Unavailable}


def make_error(code: str, message: str, status: Optional[int] = None) -> CohortError:
    """The CohortError subclass for a code (else for an HTTP status), e.g. NotFound."""
    cls = _CLASS_FOR_CODE.get(code) or _CLASS_FOR_STATUS.get(status or 0) or CohortError
    return cls(code, message, status)


def error_from_response(status: int, body: bytes, url: str = "") -> CohortError:
    """The CohortError for an HTTP error answer: from the ``{"error": {"code", "message"}}``
    body when there is one, else a code guessed from the status and the body's first line."""
    try:
        error = json.loads(body.decode("utf-8"))["error"]
        code, message = error["code"], error["message"]
        if isinstance(code, str) and isinstance(message, str):
            return make_error(code, message, status)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        pass
    text = body.decode("utf-8", "replace").strip().splitlines()
    message = text[0][:200] if text else "HTTP %d" % status
    if url:
        message = "%s: %s" % (url, message)
    return make_error(_CODE_FOR_STATUS.get(status, "unknown"), message, status)


def _normalize_server(server: str) -> str:
    server = server.strip().rstrip("/")
    if "://" not in server:
        server = "http://" + server
    if not server.startswith(("http://", "https://")):
        raise InvalidArgument("invalid_argument",
                          "server '%s': only http:// and https:// are supported" % server)
    return server


def _read_config(path: str) -> Dict[str, Any]:
    path = os.path.expanduser(path)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise InvalidArgument("invalid_argument", "config '%s': %s" % (path, e)) from None
    if not isinstance(config, dict):
        raise InvalidArgument("invalid_argument", "config '%s': not a JSON object" % path)
    for key in ("server", "token"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise InvalidArgument("invalid_argument", "config '%s': '%s' is not a string" % (path, key))
    return config


def resolve_ca(chosen: str, ca: Optional[str] = None, config_path: Optional[str] = None):
    """The certificates (a PEM file) to trust for an https:// server: the argument, else
    COHORT_CA, else what ``cohort login`` saved with the config file's server (for that server
    only); None: the system's certificate authorities."""
    if ca:
        return ca
    if os.environ.get("COHORT_CA"):
        return os.environ["COHORT_CA"]
    config = _read_config(config_path or _default_config_path())
    if config.get("ca") and config.get("server") and \
            _normalize_server(config["server"]) == chosen:
        return config["ca"]
    return None


def resolve_settings(server: Optional[str] = None, token: Optional[str] = None,
                     config_path: Optional[str] = None):
    """Returns (server URL, token or None): each from the argument, else COHORT_SERVER /
    COHORT_TOKEN, else the config file ``{"server": ..., "token": ...}``. The config file's
    token is used only with the config file's server, so it is never sent to another one."""
    config_path = config_path or _default_config_path()
    config = _read_config(config_path)
    chosen = server or os.environ.get("COHORT_SERVER") or config.get("server")
    if not chosen:
        raise InvalidArgument("invalid_argument",
                          "no cohort server: pass Client(server), set COHORT_SERVER or write "
                          "{\"server\": ..., \"token\": ...} to %s" % config_path)
    chosen = _normalize_server(chosen)
    if not token:
        token = os.environ.get("COHORT_TOKEN")
    if not token and config.get("token"):
        config_server = config.get("server")
        if config_server and _normalize_server(config_server) == chosen:
            token = config["token"]
    return chosen, token or None


def _store_path(uri: str, need_path: bool = True) -> str:
    """The API path of ``store://bucket/path``; ``need_path=False`` also takes a bare bucket."""
    prefix = "store://"
    bucket, _, rest = uri[len(prefix):].partition("/") if uri.startswith(prefix) else ("", "", "")
    if not bucket or (need_path and not rest.strip("/")):
        raise InvalidArgument("invalid_argument",
                          "'%s' is not a store URI (store://bucket/path)" % uri)
    return "/v1/store/" + urllib.parse.quote(uri[len(prefix):], safe="/")


def safe_join(root: str, rel: str) -> str:
    """``root/rel`` for a relative path from the server; raises CohortError (invalid_argument)
    when ``rel`` is absolute, empty or has a ``..`` part, so nothing is written outside root."""
    parts = rel.split("/")
    if (not rel or "\0" in rel or rel.startswith("/") or os.path.isabs(rel)
            or any(p in ("", ".", "..") for p in parts)):
        raise InvalidArgument("invalid_argument",
                          "output path '%s' would be written outside '%s'; refused" % (rel, root))
    return os.path.join(root, *parts)


def _write_stream(response, target: str) -> int:
    """Copies a response into ``target`` through a temporary file renamed into place (so a
    symbolic link at ``target`` is replaced, never followed). Returns the bytes written."""
    parent = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".cohort-download-")
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            while True:
                try:
                    chunk = response.read(1 << 20)
                except (OSError, http.client.HTTPException) as e:
                    raise Unavailable("unavailable", "%s: the download was cut off: %s" %
                                      (response.geturl(), e)) from None
                if not chunk:
                    break
                f.write(chunk)
                size += len(chunk)
        os.chmod(tmp, 0o644)  # as cohort outputs download writes it, not mkstemp's 0600
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size


# --- typed answers ---


class _Record(collections.abc.Mapping):
    """Reads like the dict the server sent (``r["state"]``, ``r.get("reason")``, ``dict(r)``,
    equal to that dict), so code written for plain records keeps working."""

    raw: Dict[str, Any]

    def __getitem__(self, key):
        return self.raw[key]

    def __iter__(self):
        return iter(self.raw)

    def __len__(self):
        return len(self.raw)


def _fields(cls, d: Dict[str, Any]) -> Dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return {k: v for k, v in d.items() if k in names}


@dataclasses.dataclass(eq=False)
class RootCause(_Record):
    """The first failure in time: which rank, where, how it ended, its last log lines and a
    hint for known failures. When that process is a launcher (torchrun/node1, mpirun/0),
    `launched` is the rank under it that the launcher's report names: {"rank": 2, "name":
    "worker/2", "what": "exited with code 3"}."""

    name: str = ""
    role: str = ""
    rank: Optional[int] = None
    node: Optional[int] = None
    exit_code: Optional[int] = None
    signal: int = 0
    attempt: int = 0
    tail: List[str] = dataclasses.field(default_factory=list)
    hint: str = ""
    launched: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> Optional["RootCause"]:
        if not isinstance(d, dict):
            return None
        values = _fields(cls, d)
        if "exit_code" not in values and "code" in d:  # result.json says "code"
            values["exit_code"] = d["code"]
        return cls(raw=dict(d), **values)

    def __str__(self):
        how = ("was killed by signal %d" % self.signal if self.signal
               else "exited with code %s" % self.exit_code)
        lines = ["%s on node %s %s" % (self.name, self.node, how)]
        if isinstance(self.launched, dict) and self.launched.get("name"):
            lines = ["%s %s, under %s on node %s, which then %s" % (
                self.launched["name"], self.launched.get("what", ""), self.name, self.node, how)]
        lines += ["  | " + line for line in self.tail[-10:]]
        if self.hint:
            lines.append("  hint: " + self.hint)
        return "\n".join(lines)


@dataclasses.dataclass(eq=False)
class JobRecord(_Record):
    """A job as the server knows it (GET /v1/jobs/{id}); times are ISO 8601 strings."""

    id: str = ""
    name: str = ""
    account: str = ""
    state: str = ""
    priority: int = 0
    framework: str = ""
    ranks: int = 0
    exit_code: Optional[int] = None
    reason: str = ""
    attempts: int = 0
    submitted: Optional[str] = None
    started: Optional[str] = None
    ended: Optional[str] = None
    root_cause: Optional[RootCause] = None
    kind: str = "job"  # "session": an interactive session (docs/sessions.md)
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "JobRecord":
        values = _fields(cls, d)
        values["root_cause"] = RootCause.from_dict(d.get("root_cause"))
        return cls(raw=dict(d), **values)

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def ok(self) -> bool:
        return self.state == "succeeded"


@dataclasses.dataclass(eq=False)
class StoreFile(_Record):
    """A file written to the store: its ``store://`` URI and size."""

    uri: str = ""
    size: int = 0
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "StoreFile":
        return cls(raw=dict(d), **_fields(cls, d))


@dataclasses.dataclass(eq=False)
class CodeUpload(_Record):
    """A workdir snapshot the server holds for one job (POST /v1/uploads)."""

    id: str = ""
    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes: int = 0
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CodeUpload":
        return cls(raw=dict(d), **_fields(cls, d))


def is_local_server(server: str) -> bool:
    """Whether the server URL names this machine by a loopback address (localhost, 127.x.x.x,
    [::1]): such a server reads a job's workdir where it is, so nothing is uploaded."""
    host = urllib.parse.urlsplit(server).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """cohort never redirects; following one would send the token elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Client:
    """A connection to one cohort server as one account.

    ``Client(server, token)``; either may be omitted and is then read from COHORT_SERVER /
    COHORT_TOKEN, else ~/.config/cohort/config.json. ``timeout`` bounds each request (seconds
    without an answer). An https:// server's certificate is always verified: against the
    system's certificate authorities, or those in the PEM file ``ca`` (else COHORT_CA, else the
    one ``cohort login --ca/--fingerprint`` saved for that server)."""

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 30.0, config_path: Optional[str] = None,
                 ca: Optional[str] = None):
        self.server, self._token = resolve_settings(server, token, config_path)
        self.timeout = timeout
        self.ca = resolve_ca(self.server, ca, config_path)
        context = ssl.create_default_context(cafile=self.ca)  # verifies names and chains
        self._opener = urllib.request.build_opener(
            _NoRedirect, urllib.request.HTTPSHandler(context=context))

    def __repr__(self):
        return "<cohort.Client %s%s>" % (self.server, "" if self._token else " (no token)")

    # --- HTTP ---

    def _open(self, method: str, path: str, query=None, data=None,
              content_type: Optional[str] = None, headers=None, timeout=None):
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        request = urllib.request.Request(url, data=data, method=method)
        if self._token:
            request.add_header("Authorization", "Bearer " + self._token)
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            return self._opener.open(request, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            with e:
                body = e.read()
            raise error_from_response(e.code, body, url) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, ssl.SSLError):
                raise Unavailable("unavailable",
                                  "the server at %s could not be trusted: %s (a private "
                                  "certificate authority's certificates: Client(ca=FILE) or "
                                  "COHORT_CA; a self-signed server: cohort login %s "
                                  "--fingerprint ...)" % (self.server, e.reason, self.server)
                                  ) from None
            reason = e.reason.strerror if isinstance(e.reason, OSError) and \
                e.reason.strerror else e.reason
            raise Unavailable("unavailable", "cannot reach %s: %s" % (url, reason)) from None
        except (OSError, http.client.HTTPException) as e:
            raise Unavailable("unavailable",
                              "cannot reach %s: %s" % (url, str(e) or type(e).__name__)) from None

    def _call(self, method: str, path: str, body: Any = None, query=None, data=None,
              content_type: Optional[str] = None, headers=None, timeout=None) -> Any:
        """Sends a request (``body`` as JSON, or raw ``data``); returns the decoded JSON answer
        (None for an empty one)."""
        if body is not None:
            data, content_type = json.dumps(body).encode("utf-8"), "application/json"
        response = self._open(method, path, query, data, content_type, headers, timeout)
        url = response.geturl()
        try:
            with response:
                raw = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise Unavailable("unavailable", "%s: the answer was cut off: %s" % (url, e)) from None
        if not raw:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise ServerError("internal", "%s: the answer is not JSON: %s" % (url, e)) from None

    def _lines(self, path: str, query: Dict[str, Any], follow: bool) -> Iterator[str]:
        """Yields the text lines of a (possibly chunked, endless) answer as they arrive. A
        followed stream that stays silent for ``timeout`` seconds is reopened at the byte
        offset already read, so a server that vanished is noticed and a quiet one is not."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        offset = int(query.get("offset", 0))
        away_since = None
        while True:
            query = dict(query, offset=offset) if offset else query
            try:
                response = self._open("GET", path, query)
            except Unavailable:
                # A followed log rides out a server restart: it is asked again from `offset`.
                away_since = away_since or time.monotonic()
                if not follow or time.monotonic() - away_since > RESTART_WINDOW:
                    raise
                time.sleep(0.3)
                continue
            try:
                while True:
                    try:
                        chunk = response.read1(65536)
                    except socket.timeout:
                        if follow:
                            break  # reopen at `offset`
                        raise Unavailable("unavailable", "%s: no data for %gs" %
                                          (response.geturl(), self.timeout)) from None
                    except (OSError, http.client.HTTPException) as e:
                        if follow:
                            break  # cut off (a server restart): reopen at `offset`
                        raise Unavailable("unavailable", "%s: the log stream was cut off: %s" %
                                          (response.geturl(), e)) from None
                    if not chunk:
                        pending += decoder.decode(b"", final=True)
                        if pending:
                            yield pending
                        return
                    offset += len(chunk)
                    away_since = None
                    pending += decoder.decode(chunk)
                    lines = pending.split("\n")
                    pending = lines.pop()
                    for line in lines:
                        yield line + "\n"
            finally:
                response.close()

    # --- jobs ---

    def submit(self, job: Union[Dict[str, Any], str, "os.PathLike[str]"], priority: int = 0,
               upload: Optional[bool] = None, max_upload: int = DEFAULT_MAX_UPLOAD) -> "Job":
        """Submits a job: the job file as a dict, its text (YAML or JSON), or the path of a job
        file (``"job.yaml"``), read as ``cohort submit -f`` reads it: a relative ``workdir`` and
        local inputs are taken against the file's directory (the current one for a dict or a
        text). The workdir is uploaded as a snapshot (``upload_code``) and the job runs on it,
        unless the server is on this machine (``upload=None``, the default, decides by the
        server's address; ``True`` always uploads, ``False`` never: the workdir is then a path
        on the server's machine). Returns the queued Job; a bad job raises InvalidArgument
        naming the field, a snapshot over ``max_upload`` bytes TooLarge."""
        try:
            job, workdir = jobfile.load_job(job)
        except jobfile.JobFileError as e:
            raise InvalidArgument("invalid_argument", str(e)) from None
        body = {"job": job, "priority": priority}
        if upload is None:
            upload = not is_local_server(self.server)
        if upload:
            body["code"] = self.upload_code(workdir, max_upload).id
        return Job(self, self._call("POST", "/v1/jobs", body))

    def upload_code(self, workdir: str, max_upload: int = DEFAULT_MAX_UPLOAD) -> CodeUpload:
        """Uploads a snapshot of the directory ``workdir`` (see cohort.jobfile) for the next
        job to run on (``submit`` does this); returns the upload, whose ``id`` a job names as
        ``"code"``. Raises TooLarge over ``max_upload`` bytes, InvalidArgument for what cannot
        be uploaded (a link leading out of it, a socket), naming the path."""
        workdir = os.path.abspath(os.fspath(workdir))
        with tempfile.TemporaryFile(prefix="cohort-upload-") as f:
            try:
                snapshot = jobfile.write_snapshot(workdir, f, max_upload)
            except OverflowError as e:
                raise TooLarge("too_large", str(e)) from None
            except ValueError as e:
                raise InvalidArgument("invalid_argument", str(e)) from None
            answer = self._call("POST", "/v1/uploads", data=f, content_type="application/x-tar",
                                headers={"Content-Length": str(snapshot.size)},
                                timeout=max(self.timeout, 300))
        return CodeUpload.from_dict(answer)

    def submit_file(self, path: str, priority: int = 0) -> "Job":
        """Submits a JSON job file as it is on the server's machine (nothing is uploaded). Its
        ``workdir`` (default: the file's directory) and its local ``inputs[].source`` paths are
        made absolute against the file's directory, as ``cohort submit -f`` does.
        ``submit(path)`` also reads YAML and uploads the workdir to a remote server."""
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        with open(path, encoding="utf-8") as f:
            try:
                job = json.load(f)
            except ValueError as e:
                raise InvalidArgument("invalid_argument", "job file '%s': %s" % (path, e)) from None
        if not isinstance(job, dict):
            raise InvalidArgument("invalid_argument", "job file '%s': not a JSON object" % path)
        base = os.path.dirname(path)
        workdir = job.get("workdir")
        if workdir is None or isinstance(workdir, str):
            workdir = os.path.expanduser(workdir or ".")
            job["workdir"] = os.path.normpath(os.path.join(base, workdir))
        for item in job.get("inputs") or []:
            source = item.get("source") if isinstance(item, dict) else None
            if isinstance(source, str) and source and "://" not in source:
                item["source"] = os.path.normpath(os.path.join(base, os.path.expanduser(source)))
        return self.submit(job, priority)

    def job(self, job_id: str) -> "Job":
        """The job with this id (404 when there is none, or it is another account's)."""
        return Job(self, self._call("GET", _job_path(job_id)))

    def jobs(self, state: Union[None, str, List[str]] = None,
             limit: Optional[int] = None) -> List["Job"]:
        """The account's jobs (an admin's: everyone's), newest first; ``state`` filters by
        one state or a list of them."""
        query = {}
        if state:
            query["state"] = state if isinstance(state, str) else ",".join(state)
        if limit is not None:
            query["limit"] = int(limit)
        answer = self._call("GET", "/v1/jobs", query=query)
        return [Job(self, record) for record in answer["jobs"]]

    def sessions(self, active: bool = True) -> List["Job"]:
        """The account's interactive sessions (docs/sessions.md), newest first: those that have
        not ended, or every one with ``active=False``. ``cohort session start`` starts one;
        ``job.stop()`` ends it."""
        return [job for job in self.jobs()
                if job.record.get("kind") == "session"
                and not (active and job.record.get("state") in FINAL_STATES)]

    def session_url(self, session: str) -> str:
        """A URL that opens the JupyterLab of ``session`` (its id or name; a session started
        with ``cohort session start --jupyter``) in a browser: it signs the browser in to that
        lab alone, and works once, within a minute (docs/sessions.md)."""
        found = [job for job in self.sessions()
                 if session in (job.record.get("id"), job.record.get("name"))]
        if len(found) != 1:
            raise NotFound("not_found",
                           "no active session '%s' (or more than one: give its id)" % session)
        job_id = found[0].record["id"]
        ticket = self._call("POST", "/v1/jobs/%s/session/jupyter/ticket"
                            % urllib.parse.quote(job_id, safe=""), body={})
        return self.server + ticket["url"]

    # --- store and shares ---

    def upload(self, local_file: str, uri: str) -> StoreFile:
        """Uploads a file to ``store://bucket/path`` (a URI ending in ``/`` gets the file's
        name). Returns a StoreFile (``uri``, ``size``; also ``["uri"]``)."""
        local_file = os.fspath(local_file)
        if uri.endswith("/"):
            uri += os.path.basename(local_file)
        path = _store_path(uri)
        with open(local_file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return StoreFile.from_dict(
                self._call("PUT", path, data=f, content_type="application/octet-stream",
                           headers={"Content-Length": str(size)}))

    def download(self, uri: str, local_file: str) -> str:
        """Downloads the file at ``store://bucket/path`` to ``local_file`` (into it, when it
        is a directory). Returns the path written."""
        local_file = os.fspath(local_file)
        if os.path.isdir(local_file):
            local_file = os.path.join(local_file, os.path.basename(uri.rstrip("/")))
        response = self._open("GET", _store_path(uri))
        with response:
            _write_stream(response, local_file)
        return local_file

    def list_files(self, uri: str) -> List[Dict[str, Any]]:
        """The files under ``store://bucket/prefix``: ``[{"path", "size"}]``, relative to it."""
        return self._call("GET", _store_path(uri, need_path=False), query={"list": 1})["files"]

    def buckets(self) -> List[Dict[str, Any]]:
        """The account's own buckets: ``[{"name", "owner", "created"}]``."""
        return self._call("GET", "/v1/buckets")["buckets"]

    def share(self, prefix: str, with_account: str, access: str = "read") -> Dict[str, Any]:
        """Grants ``with_account`` ``read`` or ``write`` access to a store prefix of one of the
        account's buckets. Returns the share (``{"id", "prefix", "owner", "with", ...}``)."""
        return self._call("POST", "/v1/shares",
                          {"prefix": prefix, "with": with_account, "access": access})

    def shares(self) -> List[Dict[str, Any]]:
        """The shares the account granted and those granted to it."""
        return self._call("GET", "/v1/shares")["shares"]

    def unshare(self, share_id: int) -> None:
        """Revokes a share at once."""
        self._call("DELETE", "/v1/shares/%s" % urllib.parse.quote(str(share_id), safe=""))

    # --- accounts and tokens ---

    def whoami(self) -> Dict[str, Any]:
        """``{"account": name, "admin": bool}`` for this client's token."""
        return self._call("GET", "/v1/whoami")

    def create_account(self, name: str, admin: bool = False, max_gpus: Optional[int] = None,
                       max_cpus: Optional[float] = None) -> Dict[str, Any]:
        """(admin) Creates an account. Returns ``{"account": {...}, "token": "cohort_..."}``;
        the token is shown only this once."""
        body = {"name": name, "admin": admin}
        if max_gpus is not None:
            body["max_gpus"] = max_gpus
        if max_cpus is not None:
            body["max_cpus"] = max_cpus
        return self._call("POST", "/v1/accounts", body)

    def accounts(self) -> List[Dict[str, Any]]:
        """(admin) Every account: ``[{"name", "admin", "max_gpus", "max_cpus", "created"}]``."""
        return self._call("GET", "/v1/accounts")["accounts"]

    def create_token(self, label: str, account: Optional[str] = None) -> Dict[str, Any]:
        """Creates a token for this account (an admin may name another). Returns ``{"id",
        "account", "label", "created", "token"}``; the token is shown only this once."""
        body = {"label": label}
        if account is not None:
            body["account"] = account
        return self._call("POST", "/v1/tokens", body)

    def tokens(self) -> List[Dict[str, Any]]:
        """The account's tokens (an admin's: all), without their secrets."""
        return self._call("GET", "/v1/tokens")["tokens"]

    def delete_token(self, token_id: int) -> None:
        """Revokes a token at once."""
        self._call("DELETE", "/v1/tokens/%s" % urllib.parse.quote(str(token_id), safe=""))


def _job_path(job_id: str, *rest: str) -> str:
    return "/".join(("/v1/jobs", urllib.parse.quote(str(job_id), safe="")) + rest)


class Job:
    """A submitted job. ``record`` is the server's job record as last fetched (``refresh``
    fetches it again); ``id``, ``name``, ``state`` and ``exit_code`` read from it."""

    def __init__(self, client: Client, record: Dict[str, Any]):
        self.client = client
        self.record = record

    @property
    def id(self) -> str:
        return self.record["id"]

    @property
    def name(self) -> str:
        return self.record.get("name", "")

    @property
    def state(self) -> str:
        return self.record["state"]

    @property
    def exit_code(self) -> Optional[int]:
        return self.record.get("exit_code")

    @property
    def done(self) -> bool:
        """True once the job is succeeded, failed or stopped (as of the last fetch)."""
        return self.state in FINAL_STATES

    @property
    def info(self) -> JobRecord:
        """The record as last fetched, typed."""
        return JobRecord.from_dict(self.record)

    @property
    def root_cause(self) -> Optional[RootCause]:
        """The first failure of a failed job (as of the last fetch); None otherwise."""
        return RootCause.from_dict(self.record.get("root_cause"))

    def __repr__(self):
        r = self.record
        text = "<Job %s %s" % (r.get("id"), r.get("state"))
        if r.get("ranks"):
            text += ", %s rank%s" % (r["ranks"], "" if r["ranks"] == 1 else "s")
        if r.get("exit_code") is not None:
            text += ", exit code %s" % r["exit_code"]
        why = (r.get("waiting") or {}).get("reason") or r.get("reason")
        if why:
            text += ": %s" % why
        return text + ">"

    def refresh(self) -> "Job":
        """Fetches the record again; returns self."""
        self.record = self.client._call("GET", _job_path(self.id))
        return self

    def wait(self, timeout: Optional[float] = None, poll: Optional[float] = None) -> JobRecord:
        """Waits until the job is final; returns its record (a JobRecord, which also reads like
        the dict: ``record["state"]``). Raises TimeoutError after
        ``timeout`` seconds (None: no limit). The job's events are followed by long-poll: the
        server answers as soon as the next one is stored, so nothing polls. (``poll`` is
        accepted for compatibility and not used.)"""
        deadline = None if timeout is None else time.monotonic() + timeout
        after = 0
        away_since = None
        while not self.done:
            wait = 30.0
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("job '%s' is still %s after %gs" %
                                       (self.id, self.state, timeout))
                wait = min(wait, left)
            try:
                answer = self.client._call(
                    "GET", _job_path(self.id, "events"),
                    query={"after": after, "wait": "%dms" % max(1, int(wait * 1000))},
                    timeout=wait + self.client.timeout)
                if isinstance(answer, dict) and isinstance(answer.get("last_seq"), int):
                    after = max(after, answer["last_seq"])
                self.refresh()
                away_since = None
            except Unavailable:
                # A server restart is ridden out; a server gone for longer is an error.
                away_since = away_since or time.monotonic()
                if time.monotonic() - away_since > RESTART_WINDOW:
                    raise
                time.sleep(0.3)
        return self.info

    def follow_events(self, after: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Yields the job's events as they are stored (Server-Sent Events), each with its
        ``seq``, until the job's final state event; ``after=SEQ`` starts after that one. A
        stream that breaks is resumed where it stopped, so no event is lost or repeated."""
        last = after
        away_since = None
        while True:
            headers = {"Accept": "text/event-stream"}
            query = {}
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            try:
                response = self.client._open("GET", _job_path(self.id, "events"), query or None,
                                             headers=headers, timeout=self.client.timeout + 30)
            except Unavailable:
                away_since = away_since or time.monotonic()  # a server restart: ridden out
                if time.monotonic() - away_since > RESTART_WINDOW:
                    raise
                time.sleep(0.3)
                continue
            away_since = None
            ended = False
            try:
                data, event_id = [], None
                while True:
                    try:
                        raw = response.readline()
                    except (OSError, http.client.HTTPException):
                        break  # resume from `last`
                    if not raw:
                        ended = True
                        break
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if line == "":
                        if data:
                            event = json.loads("\n".join(data))
                            if event_id is not None:
                                last = int(event_id)
                            final = event.get("event") == "state" and \
                                event.get("state") in FINAL_STATES
                            yield event
                            if final:
                                return
                        data, event_id = [], None
                    elif line.startswith(":"):
                        continue
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))
                    elif line.startswith("id:"):
                        event_id = line[3:].strip()
            finally:
                response.close()
            if ended and not self.client.job(self.id).done:
                continue  # the stream ended before the job's end (a server stopping): resume
            if ended:
                return

    def logs(self, follow: bool = False, rank: Optional[int] = None,
             offset: int = 0) -> Iterator[str]:
        """Yields the log's lines, each with its ``\\n`` (the last one may lack it). By default
        the merged log, every line prefixed ``[role/rank node]``; ``rank=R`` that rank's alone.
        ``follow=True`` keeps yielding new lines until the job ends."""
        query = {}
        if rank is not None:
            query["rank"] = int(rank)
        if offset:
            query["offset"] = int(offset)
        if follow:
            query["follow"] = 1
        return self.client._lines(_job_path(self.id, "logs"), query, follow)

    def events(self) -> List[Dict[str, Any]]:
        """The job's events in order: ``[{"time", "event", ...}]``."""
        return self.client._call("GET", _job_path(self.id, "events"))["events"]

    def ranks(self) -> List[Dict[str, Any]]:
        """Every rank's name, node, state and exit code (empty before the job starts)."""
        return self.client._call("GET", _job_path(self.id, "ranks"))["ranks"]

    def metrics(self, after: int = 0, limit: int = 1000) -> Dict[str, List[Dict[str, Any]]]:
        """The job's training metrics (``cohort.log`` records: ``{"t", "rank", "step", "loss",
        ...}``) and its ranks' resource samples, the latest ``limit`` of each after ``after``
        (unix nanoseconds): ``{"metrics": [...], "resources": [...]}``."""
        return self.client._call("GET", _job_path(self.id, "metrics"),
                                 query={"after": after, "limit": limit})

    def spec(self) -> Dict[str, Any]:
        """The job file this job runs, every field written out (durations in ms, memory in
        bytes): ``client.submit(job.spec())`` runs the same job again."""
        record = self.record if "spec" in self.record else self.refresh().record
        spec = record.get("spec")
        if not isinstance(spec, dict):
            raise NotFound("not_found", "job %s has no recorded job file" % self.id)
        return dict(spec)

    def rerun(self, priority: Optional[int] = None, **changes: Any) -> "Job":
        """Submits this job's job file again as a new job and returns it; keyword arguments
        replace top-level fields first (``job.rerun(name="lr-0.1", hyperparameters={...})``).
        The priority is this job's unless given. Its workdir is the server's (a job that ran
        uploaded code runs a copy of that code), so nothing is uploaded."""
        spec = self.spec()
        spec.update(changes)
        return self.client.submit(spec, self.record.get("priority", 0) if priority is None
                                  else priority, upload=False)

    def stop(self) -> "Job":
        """Stops the job (a queued one at once, a running one with SIGTERM, then SIGKILL after
        its grace period); returns self with the new record."""
        self.record = self.client._call("POST", _job_path(self.id, "stop"))
        return self

    def delete(self) -> None:
        """Removes the job's record, events, logs and outputs (409 unless the job is final)."""
        self.client._call("DELETE", _job_path(self.id))

    def outputs(self) -> List[Dict[str, Any]]:
        """The files in the job's output directory: ``[{"path", "size"}]``, sorted."""
        return self.client._call("GET", _job_path(self.id, "outputs"))["files"]

    def download_outputs(self, dest: str) -> List[str]:
        """Downloads every output file under ``dest`` (created, with subdirectories); returns
        the paths written. A path that would land outside ``dest`` is refused before anything
        is written; a link inside ``dest`` that leads out of it, before that file is written."""
        root = os.path.realpath(os.fspath(dest))
        plan = [(f["path"], safe_join(root, f["path"])) for f in self.outputs()]
        os.makedirs(root, exist_ok=True)
        written = []
        for rel, target in plan:
            parent = os.path.dirname(target)
            # A symbolic link already inside dest must not carry the file elsewhere.
            real = os.path.realpath(parent)
            if os.path.commonpath([real, root]) != root:
                raise InvalidArgument("invalid_argument", "output path '%s' would be written "
                                  "outside '%s' (through '%s'); refused" % (rel, root, real))
            os.makedirs(parent, exist_ok=True)
            quoted = urllib.parse.quote(rel, safe="/")
            response = self.client._open("GET", _job_path(self.id, "outputs", quoted))
            with response:
                _write_stream(response, target)
            written.append(target)
        return written
