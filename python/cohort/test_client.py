"""Tests for cohort.Client, the SDK of ``cohort server`` (standard library only).

    python3 -m unittest discover -s python/cohort -t python -p test_client.py
    COHORT_BIN=build/cohort COHORT_TEST_RANK_BIN=build/cohort-test-rank python3 -m unittest ...

The main tests (RealServer) start the real ``cohort server`` on port 0 with a fresh data root per
test; they are skipped while COHORT_BIN is unset or has no ``server`` command. The others need no
server: settings, error parsing and path checks are pure, and a tiny http.server plays the
server only for the log stream's line splitting and the error bodies.
"""

import http.server
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
from unittest import mock

from cohort import Client, CohortError, Job, Unavailable
from cohort import client as client_module

_NO_CONFIG = "/nonexistent/cohort-test/config.json"
_CLEAN = {k: v for k, v in os.environ.items()
          if k not in ("COHORT_SERVER", "COHORT_TOKEN") and not k.lower().endswith("_proxy")}


class Settings(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-client-test-")
        self.config = os.path.join(self.tmp, "config.json")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_config(self, config):
        with open(self.config, "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))

    def test_arguments_win_over_environment_and_config(self):
        self.write_config({"server": "http://config:1", "token": "cohort_config"})
        env = dict(_CLEAN, COHORT_SERVER="http://env:2", COHORT_TOKEN="cohort_env")
        with mock.patch.dict(os.environ, env, clear=True):
            c = Client("http://arg:3/", token="cohort_arg", config_path=self.config)
            self.assertEqual((c.server, c._token), ("http://arg:3", "cohort_arg"))
            c = Client(config_path=self.config)
            self.assertEqual((c.server, c._token), ("http://env:2", "cohort_env"))

    def test_config_file_is_read_when_the_environment_is_empty(self):
        self.write_config({"server": "127.0.0.1:8600", "token": "cohort_config"})
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            c = Client(config_path=self.config)
        self.assertEqual((c.server, c._token), ("http://127.0.0.1:8600", "cohort_config"))

    def test_config_token_is_never_sent_to_another_server(self):
        self.write_config({"server": "http://config:1", "token": "cohort_config"})
        with mock.patch.dict(os.environ, dict(_CLEAN, COHORT_SERVER="http://other:2"),
                             clear=True):
            c = Client(config_path=self.config)
            self.assertEqual((c.server, c._token), ("http://other:2", None))
            c = Client("http://config:1/", config_path=self.config)  # the same server
            self.assertEqual(c._token, "cohort_config")

    def test_config_token_without_a_server_is_not_sent_anywhere(self):
        self.write_config({"token": "cohort_config"})
        with mock.patch.dict(os.environ, dict(_CLEAN, COHORT_SERVER="http://other:2"),
                             clear=True):
            c = Client(config_path=self.config)
        self.assertEqual((c.server, c._token), ("http://other:2", None))

    def test_no_server_anywhere_says_where_to_put_one(self):
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            with self.assertRaises(CohortError) as caught:
                Client(config_path=self.config)
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertIn("COHORT_SERVER", caught.exception.message)

    def test_a_broken_config_file_is_named(self):
        self.write_config("{not json")
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            with self.assertRaisesRegex(CohortError, re.escape(self.config)):
                Client(config_path=self.config)
        self.write_config({"server": 8600})
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            with self.assertRaisesRegex(CohortError, "'server' is not a string"):
                Client(config_path=self.config)

    def test_only_http_servers(self):
        with self.assertRaisesRegex(CohortError, "only http"):
            Client("ftp://host", config_path=_NO_CONFIG)


class ErrorParsing(unittest.TestCase):
    def test_the_servers_error_body_is_used(self):
        body = b'{"error": {"code": "not_found", "message": "job \'x\' not found"}}'
        e = client_module.error_from_response(404, body, "http://h/v1/jobs/x")
        self.assertEqual((e.status, e.code, e.message), (404, "not_found", "job 'x' not found"))
        self.assertEqual(str(e), "job 'x' not found (HTTP 404 not_found)")

    def test_a_body_that_is_not_cohorts_gets_a_code_from_the_status(self):
        e = client_module.error_from_response(502, b"<html>Bad Gateway</html>\n", "http://h/x")
        self.assertEqual((e.status, e.code), (502, "unavailable"))
        self.assertEqual(e.message, "http://h/x: <html>Bad Gateway</html>")
        e = client_module.error_from_response(400, b'{"error": "flat"}')
        self.assertEqual((e.code, e.message), ("invalid_argument", '{"error": "flat"}'))
        e = client_module.error_from_response(418, b"")
        self.assertEqual((e.code, e.message), ("unknown", "HTTP 418"))


class _FakeClient:
    """Answers _call from a table and records every _open (a download)."""

    timeout = 30.0

    def __init__(self, answers):
        self.answers = answers
        self.opened = []

    def _call(self, method, path, body=None, query=None, **kwargs):
        return self.answers[(method, path)]

    def _open(self, method, path, *args, **kwargs):
        self.opened.append(path)
        raise AssertionError("nothing may be downloaded: %s" % path)


class Paths(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-client-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_safe_join_refuses_paths_that_leave_the_root(self):
        for bad in ("../x", "a/../../x", "/etc/passwd", "", "a//b", "./a", "a/", "a\0b", ".."):
            with self.assertRaises(CohortError, msg=bad) as caught:
                client_module.safe_join("/dest", bad)
            self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertEqual(client_module.safe_join("/dest", "sub/model.pt"), "/dest/sub/model.pt")
        self.assertEqual(client_module.safe_join("/dest", "..hidden"), "/dest/..hidden")

    def test_download_outputs_refuses_before_writing_anything(self):
        fake = _FakeClient({("GET", "/v1/jobs/j1/outputs"):
                            {"files": [{"path": "ok.txt", "size": 1},
                                       {"path": "../escape.txt", "size": 1}]}})
        dest = os.path.join(self.tmp, "dest")
        with self.assertRaisesRegex(CohortError, r"'\.\./escape\.txt'"):
            Job(fake, {"id": "j1", "state": "succeeded"}).download_outputs(dest)
        self.assertEqual(fake.opened, [])
        self.assertFalse(os.path.exists(dest))
        self.assertEqual(os.listdir(self.tmp), [])

    def test_download_outputs_refuses_a_symlink_in_dest_that_leads_out(self):
        outside = os.path.join(self.tmp, "outside")
        dest = os.path.join(self.tmp, "dest")
        os.makedirs(outside)
        os.makedirs(dest)
        os.symlink(outside, os.path.join(dest, "link"))
        fake = _FakeClient({("GET", "/v1/jobs/j1/outputs"):
                            {"files": [{"path": "link/sub/x.txt", "size": 1}]}})
        with self.assertRaisesRegex(CohortError, "outside"):
            Job(fake, {"id": "j1", "state": "succeeded"}).download_outputs(dest)
        self.assertEqual(fake.opened, [])
        self.assertEqual(os.listdir(outside), [])

    def test_store_uris_are_checked(self):
        c = Client("http://127.0.0.1:1", token="t", config_path=_NO_CONFIG)
        for bad in ("s3://bucket/x", "store://", "store:///x", "/local/path", "store://bucket"):
            with self.assertRaisesRegex(CohortError, "not a store URI", msg=bad):
                c.upload(__file__, bad)
        self.assertEqual(client_module._store_path("store://models/run 1/a#b"),
                         "/v1/store/models/run%201/a%23b")


class JobWithoutServer(unittest.TestCase):
    def test_submit_file_makes_workdir_absolute_against_the_files_directory(self):
        tmp = tempfile.mkdtemp(prefix="cohort-client-test-")
        self.addCleanup(shutil.rmtree, tmp, True)
        os.makedirs(os.path.join(tmp, "jobs", "code"))
        c = Client("http://127.0.0.1:1", token="t", config_path=_NO_CONFIG)
        sent = []
        c._call = lambda method, path, body=None, **kw: sent.append((method, path, body)) or \
            {"id": "j1", "state": "queued"}
        for workdir, want in (("code", os.path.join(tmp, "jobs", "code")),
                              (None, os.path.join(tmp, "jobs")),
                              ("../jobs/./code", os.path.join(tmp, "jobs", "code")),
                              ("/abs", "/abs")):
            job = {"name": "x", "command": ["true"]}
            if workdir is not None:
                job["workdir"] = workdir
            path = os.path.join(tmp, "jobs", "job.json")
            with open(path, "w") as f:
                json.dump(job, f)
            self.assertEqual(c.submit_file(path, priority=5).id, "j1")
            method, route, body = sent.pop()
            self.assertEqual((method, route, body["priority"]), ("POST", "/v1/jobs", 5))
            self.assertEqual(body["job"]["workdir"], want, workdir)
        with open(path, "w") as f:
            f.write("name: yaml")
        with self.assertRaisesRegex(CohortError, "job file '%s'" % re.escape(path)):
            c.submit_file(path)

    def test_submit_file_makes_local_inputs_absolute_but_not_store_ones(self):
        tmp = tempfile.mkdtemp(prefix="cohort-client-test-")
        self.addCleanup(shutil.rmtree, tmp, True)
        c = Client("http://127.0.0.1:1", token="t", config_path=_NO_CONFIG)
        sent = []
        c._call = lambda method, path, body=None, **kw: sent.append(body) or \
            {"id": "j1", "state": "queued"}
        path = os.path.join(tmp, "job.json")
        with open(path, "w") as f:
            json.dump({"name": "x", "command": ["true"],
                       "inputs": [{"source": "data", "target": "in"},
                                  {"source": "store://b/p", "target": "s"},
                                  {"source": "/abs", "target": "a"}]}, f)
        c.submit_file(path)
        self.assertEqual([i["source"] for i in sent[0]["job"]["inputs"]],
                         [os.path.join(tmp, "data"), "store://b/p", "/abs"])

    def test_wait_raises_timeout_error_naming_the_job(self):
        fake = _FakeClient({("GET", "/v1/jobs/j1"): {"id": "j1", "state": "queued"},
                            ("GET", "/v1/jobs/j1/events"): {"events": [], "last_seq": 0,
                                                             "ended": False}})
        job = Job(fake, {"id": "j1", "state": "queued"})
        with self.assertRaisesRegex(TimeoutError, "job 'j1' is still queued after 0.1s"):
            job.wait(timeout=0.1, poll=0.02)

    def test_wait_returns_the_final_record(self):
        records = iter([{"id": "j1", "state": "running"},
                        {"id": "j1", "state": "succeeded", "exit_code": 0}])

        class Fake(_FakeClient):
            def _call(self, method, path, body=None, query=None, **kwargs):
                if path.endswith("/events"):
                    return {"events": [], "last_seq": 0, "ended": False}
                return next(records)

        job = Job(Fake({}), {"id": "j1", "state": "queued"})
        self.assertEqual(job.wait(timeout=5, poll=0.01)["exit_code"], 0)
        self.assertTrue(job.done)

    def test_wait_long_polls_the_events_after_the_last_seen_and_never_sleeps(self):
        records = iter([{"id": "j1", "state": "running"},
                        {"id": "j1", "state": "succeeded", "exit_code": 0}])
        polls = []

        class Fake(_FakeClient):
            def _call(self, method, path, body=None, query=None, **kwargs):
                if path.endswith("/events"):
                    polls.append((dict(query), kwargs.get("timeout")))
                    return {"events": [{"seq": 3 + len(polls)}], "last_seq": 3 + len(polls),
                            "ended": False}
                return next(records)

        job = Job(Fake({}), {"id": "j1", "state": "queued"})
        with mock.patch.object(client_module.time, "sleep",
                               side_effect=AssertionError("Job.wait slept: it polls")):
            self.assertEqual(job.wait()["state"], "succeeded")
        self.assertEqual([q["after"] for q, _ in polls], [0, 4])
        self.assertTrue(all(q["wait"] == "30000ms" for q, _ in polls), polls)
        self.assertTrue(all(t > 30 for _, t in polls), "the read timeout is under the wait")

    def test_repr_says_what_a_person_wants_to_know(self):
        c = _FakeClient({})
        self.assertEqual(repr(Job(c, {"id": "d-1", "state": "queued", "ranks": 4, "waiting": {
            "kind": "resources", "reason": "needs 4 CPUs, 2 free"}, "reason": ""})),
            "<Job d-1 queued, 4 ranks: needs 4 CPUs, 2 free>")
        self.assertEqual(repr(Job(c, {"id": "d-1", "state": "failed", "ranks": 1,
                                      "exit_code": 3, "reason": "rank 0 exited with code 3"})),
                         "<Job d-1 failed, 1 rank, exit code 3: rank 0 exited with code 3>")


class _FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-cohort"

    def log_message(self, *args):
        pass

    def send_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.server.requests.append((url.path, query, self.headers.get("Authorization")))
        if url.path == "/v1/jobs/j1/logs" and "offset" not in query:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.send_chunk(b"[worker/0 0] hel")
            self.send_chunk(b"lo\n[worker/0 0] caf\xc3")  # a line and a character split
            self.send_chunk(b"\xa9\n")
            if query.get("follow") == "1" and self.server.silent_after_first:
                time.sleep(1)  # silent: the client reconnects at its offset
                return
            self.server.released = self.server.release.wait(5)
            self.send_chunk(b"line three\nno newline at the end")
            self.send_chunk(b"")
        elif url.path == "/v1/jobs/j1/logs":
            body = b"[worker/0 0] after the silence\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif url.path == "/v1/jobs/missing":
            body = b'{"error": {"code": "not_found", "message": "job \'missing\' not found"}}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            body = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(502)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


class WireWithAFakeServer(unittest.TestCase):
    """Only the stream and error-body paths; the real server is tested in RealServer."""

    def setUp(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHandler)
        self.httpd.daemon_threads = True
        self.httpd.requests = []
        self.httpd.release = threading.Event()
        self.httpd.released = False
        self.httpd.silent_after_first = False
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.addCleanup(self.httpd.server_close)
        self.addCleanup(self.httpd.shutdown)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        env = mock.patch.dict(os.environ, _CLEAN, clear=True)
        env.start()
        self.addCleanup(env.stop)
        self.client = Client(self.url, token="cohort_t", config_path=_NO_CONFIG)

    def job(self):
        return Job(self.client, {"id": "j1", "state": "running"})

    def test_lines_arrive_as_they_are_streamed_and_are_split_only_at_newlines(self):
        lines = self.job().logs(follow=True, rank=0)
        self.assertEqual(next(lines), "[worker/0 0] hello\n")
        self.httpd.release.set()  # the server sends the rest only now
        self.assertEqual(list(lines), ["[worker/0 0] caf\u00e9\n", "line three\n",
                                       "no newline at the end"])
        self.assertTrue(self.httpd.released, "the first line came only with the last chunk")
        self.assertEqual(self.httpd.requests,
                         [("/v1/jobs/j1/logs", {"follow": "1", "rank": "0"}, "Bearer cohort_t")])

    def test_a_silent_followed_stream_is_reopened_at_its_offset(self):
        self.httpd.silent_after_first = True
        self.client.timeout = 0.3
        lines = list(self.job().logs(follow=True))
        self.assertEqual(lines, ["[worker/0 0] hello\n", "[worker/0 0] caf\u00e9\n",
                                 "[worker/0 0] after the silence\n"])
        offset = str(len(b"[worker/0 0] hello\n[worker/0 0] caf\xc3\xa9\n"))
        self.assertEqual([r[1] for r in self.httpd.requests],
                         [{"follow": "1"}, {"follow": "1", "offset": offset}])

    def test_the_servers_error_body_becomes_a_cohort_error(self):
        with self.assertRaises(CohortError) as caught:
            self.client.job("missing")
        e = caught.exception
        self.assertEqual((e.status, e.code, e.message),
                         (404, "not_found", "job 'missing' not found"))

    def test_an_answer_that_is_not_cohorts_still_becomes_a_cohort_error(self):
        with self.assertRaises(CohortError) as caught:
            self.client.whoami()
        e = caught.exception
        self.assertEqual((e.status, e.code), (502, "unavailable"))
        self.assertIn("502 Bad Gateway", e.message)

    def test_a_server_that_is_not_there_is_unavailable_naming_the_url(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        c = Client("http://127.0.0.1:%d" % port, token="t", config_path=_NO_CONFIG)
        with self.assertRaises(CohortError) as caught:
            c.whoami()
        e = caught.exception
        self.assertEqual((e.status, e.code), (None, "unavailable"))
        self.assertIn("http://127.0.0.1:%d/v1/whoami" % port, e.message)


def _server_missing_reason():
    binary = os.environ.get("COHORT_BIN")
    if not binary:
        return "set COHORT_BIN to a cohort binary with 'cohort server' to run these tests"
    try:
        rc = subprocess.run([binary, "server", "--help"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=20).returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run '%s server --help': %s" % (binary, e)
    if rc != 0:
        return "'%s server --help' exited %d: this cohort has no server yet" % (binary, rc)
    return None


def _test_rank_binary():
    path = os.environ.get("COHORT_TEST_RANK_BIN")
    if not path:
        path = os.path.join(os.path.dirname(os.path.abspath(os.environ["COHORT_BIN"])),
                            "cohort-test-rank")
    return path if os.access(path, os.X_OK) else None


_START_DEADLINE = 20  # seconds for the server to say where it listens
_JOB_DEADLINE = 30  # seconds for a ~1 s job to end


class RealServer(unittest.TestCase):
    """The SDK against the real ``cohort server``: one server and data root per test."""

    @classmethod
    def setUpClass(cls):
        reason = _server_missing_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.binary = os.environ["COHORT_BIN"]
        cls.rank_binary = _test_rank_binary()

    def setUp(self):
        env = mock.patch.dict(os.environ, _CLEAN, clear=True)  # no proxy for 127.0.0.1
        env.start()
        self.addCleanup(env.stop)
        self.tmp = tempfile.mkdtemp(prefix="cohort-client-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # A server run as root runs each account's ranks as a user of its own, who must be able
        # to enter the data root (mkdtemp makes it 0700).
        os.chmod(self.tmp, 0o755)
        self.workdir = os.path.join(self.tmp, "code")
        os.makedirs(self.workdir)
        self.stderr_path = os.path.join(self.tmp, "server.stderr")
        data_root = os.path.join(self.tmp, "data")
        with open(self.stderr_path, "wb") as stderr:
            self.server = subprocess.Popen(
                [self.binary, "server", "--listen", "127.0.0.1:0", "--data-root", data_root],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                universal_newlines=True)
        self.addCleanup(self.stop_server)
        lines = queue.Queue()

        def read_stdout():  # keeps draining, so the server never blocks on a full pipe
            for line in self.server.stdout:
                lines.put(line)
            lines.put(None)

        self.stdout_reader = threading.Thread(target=read_stdout, daemon=True)
        self.stdout_reader.start()
        url, token = None, None
        deadline = time.monotonic() + _START_DEADLINE
        while url is None:
            left = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                self.fail("the server did not say where it listens within %ds; stderr:\n%s" %
                          (_START_DEADLINE, self.server_stderr()))
            if line is None:
                self.fail("the server exited with %s before listening; stderr:\n%s" %
                          (self.server.wait(), self.server_stderr()))
            found = re.search(r"cohort server: listening on (http://\S+)", line)
            url = found.group(1) if found else None
            found = re.search(r"cohort server: admin token: (\S+)", line)
            token = found.group(1) if found else token
        if token is None:
            with open(os.path.join(data_root, "server", "admin.token")) as f:
                token = f.read().strip()
        self.url = url
        self.admin = Client(url, token=token, config_path=_NO_CONFIG)

    def test_an_https_server_is_verified_against_the_given_certificate(self):
        data_root = os.path.join(self.tmp, "tls-data")
        server = subprocess.Popen(
            [self.binary, "server", "--listen", "127.0.0.1:0", "--data-root", data_root,
             "--tls-self-signed"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            universal_newlines=True)
        try:
            url = None
            for line in server.stdout:
                found = re.search(r"cohort server: listening on (https://\S+)", line)
                if found:
                    url = found.group(1)
                if "admin token" in line:
                    break
            self.assertIsNotNone(url)
            with open(os.path.join(data_root, "server", "admin.token")) as f:
                token = f.read().strip()
            cert = os.path.join(data_root, "server", "tls", "cert.pem")
            trusted = Client(url, token=token, config_path=_NO_CONFIG, ca=cert)
            self.assertEqual(trusted.whoami()["account"], "admin")
            # Not trusted: refused before the token is sent, saying why.
            with self.assertRaises(Unavailable) as caught:
                Client(url, token=token, config_path=_NO_CONFIG).whoami()
            self.assertIn("could not be trusted", caught.exception.message)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
            server.stdout.close()

    def stop_server(self):
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.stdout_reader.join(10)
        self.server.stdout.close()

    def server_stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()[-4000:]

    def need_rank_binary(self):
        if not self.rank_binary:
            self.skipTest("set COHORT_TEST_RANK_BIN to the cohort-test-rank helper")
        return self.rank_binary

    def rank_job(self, *actions, name="t"):
        return {"name": name, "framework": "generic", "workdir": self.workdir,
                "command": [self.need_rank_binary()] + list(actions)}

    def account(self, name):
        """A new non-admin account and a Client for it."""
        created = self.admin.create_account(name)
        self.assertEqual(created["account"]["name"], name)
        return Client(self.url, token=created["token"], config_path=_NO_CONFIG)

    def wait(self, job):
        try:
            return job.wait(timeout=_JOB_DEADLINE, poll=0.1)
        except TimeoutError:
            self.fail("%r did not end; server stderr:\n%s" % (job, self.server_stderr()))

    def test_an_echoing_job_succeeds_and_its_log_has_the_line(self):
        job = self.admin.submit(self.rank_job("echo=hello"), priority=0)
        self.assertIn(job.id, repr(job))
        record = self.wait(job)
        self.assertEqual((record["state"], record["exit_code"]), ("succeeded", 0), record)
        lines = list(job.logs())
        self.assertTrue(any(line.endswith("hello\n") for line in lines), lines)
        self.assertEqual(list(job.logs(rank=0)), ["hello\n"])
        self.assertEqual(job.events()[0]["event"], "submitted")
        ranks = job.ranks()
        self.assertEqual([(r["name"], r["state"], r["exit_code"]) for r in ranks],
                         [("worker/0", "exited", 0)])
        self.assertIn(job.id, [j.id for j in self.admin.jobs(state="succeeded")])
        self.assertNotIn(job.id, [j.id for j in self.admin.jobs(state=["queued", "running"])])
        self.assertEqual(self.admin.job(job.id).record, job.refresh().record)

    def test_following_the_log_ends_when_the_job_ends(self):
        job = self.admin.submit(self.rank_job("echo=start", "sleep=1", "echo=end"))
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(job.logs(follow=True)),
                                  daemon=True)
        reader.start()
        reader.join(_JOB_DEADLINE)
        self.assertFalse(reader.is_alive(), "follow=True did not end with the job")
        self.assertTrue(any(line.startswith("[") and line.endswith("] start\n")
                            for line in lines), lines)
        self.assertTrue(any(line.endswith("] end\n") for line in lines), lines)
        self.assertEqual(self.wait(job)["state"], "succeeded")

    def test_follow_events_yields_every_event_once_in_order_until_the_final_state(self):
        job = self.admin.submit(self.rank_job("echo=a", "sleep=1", "echo=b"))
        events = []
        reader = threading.Thread(target=lambda: events.extend(job.follow_events()),
                                  daemon=True)
        reader.start()
        reader.join(_JOB_DEADLINE)
        self.assertFalse(reader.is_alive(), "follow_events did not end with the job")
        seqs = [e["seq"] for e in events]
        self.assertEqual(seqs, sorted(set(seqs)), events)
        self.assertEqual(events[0]["event"], "submitted")
        self.assertEqual((events[-1]["event"], events[-1]["state"]), ("state", "succeeded"))
        stored = sorted(e["seq"] for e in job.events())
        self.assertEqual(seqs, stored[:len(seqs)])
        # Resumed after a seq: only what came later.
        later = list(job.follow_events(after=seqs[1]))
        self.assertEqual([e["seq"] for e in later], seqs[2:])

    def test_a_failing_job_is_failed_with_the_ranks_exit_code(self):
        job = self.admin.submit(self.rank_job("echo=about to fail", "exit=3"))
        record = self.wait(job)
        self.assertEqual((record["state"], record["exit_code"]), ("failed", 3), record)
        self.assertEqual(record["root_cause"]["exit_code"], 3, record)
        self.assertIn("exit code 3", repr(job))

    def test_rerun_submits_the_same_job_file_again_with_changes(self):
        job = self.admin.submit(self.rank_job("echo=first run", name="original"), priority=3)
        self.assertEqual(self.wait(job)["state"], "succeeded")
        spec = job.spec()
        self.assertEqual(spec["command"], self.rank_job("echo=first run")["command"])
        self.assertEqual(spec["workdir"], self.workdir)
        again = job.rerun(name="again")
        self.assertNotEqual(again.id, job.id)
        record = self.wait(again)
        self.assertEqual((record["state"], record["name"], record["priority"]),
                         ("succeeded", "again", 3), record)
        self.assertTrue(any(line.endswith("first run\n") for line in again.logs()))
        # The new job's record has the same job file but for the name.
        self.assertEqual(dict(again.spec(), name="original"), spec)

    def test_a_job_file_as_yaml_text_is_read_as_cohort_submit_reads_it(self):
        text = ("name: from-yaml\nframework: generic\nworkdir: %s\n"
                "command: [%s, \"echo=yaml says hi\"]\n" % (self.workdir, self.need_rank_binary()))
        job = self.admin.submit(text)
        self.assertEqual(self.wait(job)["state"], "succeeded")
        self.assertEqual(job.spec()["name"], "from-yaml")
        with self.assertRaises(CohortError) as caught:
            self.admin.submit("name: x\ncommand: [true]\nroles: {worker: {nodes: zero}}\n")
        self.assertEqual(caught.exception.status, 400)
        self.assertIn("nodes", str(caught.exception))

    def test_a_submitted_job_file_runs_on_the_uploaded_snapshot_of_its_workdir(self):
        code = os.path.join(self.tmp, "elsewhere", "code")
        os.makedirs(code)
        with open(os.path.join(code, "run.sh"), "w") as f:
            f.write("pwd\ncat data.txt\n")
        with open(os.path.join(code, "data.txt"), "w") as f:
            f.write("snapshot\n")
        path = os.path.join(self.tmp, "elsewhere", "job.json")
        with open(path, "w") as f:
            json.dump({"name": "snap", "framework": "generic", "workdir": "code",
                       "command": ["sh", "run.sh"]}, f)
        job = self.admin.submit(path, upload=True)
        shutil.rmtree(code)  # the server never reads it: it runs what was uploaded
        record = self.wait(job)
        self.assertEqual(record.state, "succeeded", record)
        lines = list(job.logs(rank=0))
        self.assertTrue(lines[0].rstrip("\n").endswith("/jobs/%s/code" % job.id), lines)
        self.assertEqual(lines[1:], ["snapshot\n"])
        self.assertTrue(job.spec()["workdir"].endswith("/jobs/%s/code" % job.id))
        # Run again, it runs the same snapshot, though the files it came from are gone.
        again = job.rerun(name="snap-again")
        self.assertEqual(self.wait(again).state, "succeeded")
        self.assertEqual(list(again.logs(rank=0))[1:], ["snapshot\n"])

    def test_outputs_round_trip_into_a_local_directory(self):
        job = self.admin.submit({
            "name": "outputs", "framework": "generic", "workdir": self.workdir,
            "command": ["sh", "-c", "echo hi > $COHORT_OUTPUT_DIR/a.txt && mkdir -p "
                        "$COHORT_OUTPUT_DIR/sub && echo there > $COHORT_OUTPUT_DIR/sub/b.txt"]})
        self.assertEqual(self.wait(job)["state"], "succeeded")
        self.assertEqual(job.outputs(), [{"path": "a.txt", "size": 3},
                                         {"path": "sub/b.txt", "size": 6}])
        dest = os.path.join(self.tmp, "downloaded")
        written = job.download_outputs(dest)
        self.assertEqual(written, [os.path.join(dest, "a.txt"), os.path.join(dest, "sub", "b.txt")])
        with open(written[0]) as f:
            self.assertEqual(f.read(), "hi\n")
        with open(written[1]) as f:
            self.assertEqual(f.read(), "there\n")
        self.assertEqual(os.stat(written[0]).st_mode & 0o777, 0o644)

    def test_another_accounts_job_is_not_found(self):
        alice, bob = self.account("alice"), self.account("bob")
        self.assertEqual(alice.whoami(), {"account": "alice", "admin": False})
        job = alice.submit(self.rank_job("echo=mine"))
        for attempt in (lambda: bob.job(job.id), lambda: Job(bob, job.record).stop(),
                        lambda: list(Job(bob, job.record).logs())):
            with self.assertRaises(CohortError) as caught:
                attempt()
            self.assertEqual((caught.exception.status, caught.exception.code),
                             (404, "not_found"))
        self.assertNotIn(job.id, [j.id for j in bob.jobs()])
        self.assertEqual(self.admin.job(job.id).record["account"], "alice")  # admins see all
        self.assertEqual(self.wait(job)["state"], "succeeded")

    def test_a_bad_token_is_unauthenticated(self):
        for token in ("cohort_not_a_token", None):
            with self.assertRaises(CohortError) as caught:
                Client(self.url, token=token, config_path=_NO_CONFIG).whoami()
            self.assertEqual((caught.exception.status, caught.exception.code),
                             (401, "unauthenticated"))
        self.assertTrue(self.admin.whoami()["admin"])

    def test_a_job_without_a_command_is_refused_naming_the_field(self):
        with self.assertRaises(CohortError) as caught:
            self.admin.submit({"name": "nothing", "workdir": self.workdir})
        e = caught.exception
        self.assertEqual((e.status, e.code), (400, "invalid_argument"))
        self.assertIn("command", e.message)
        self.assertEqual(self.admin.jobs(), [])

    def test_stop_then_delete(self):
        job = self.admin.submit(dict(self.rank_job("sleep=60"), policy={"grace_period": "1s"}))
        with self.assertRaises(CohortError) as caught:
            job.delete()  # not final yet
        self.assertEqual(caught.exception.status, 409)
        self.assertIn(job.stop().state, ("stopping", "stopped"))
        self.assertEqual(self.wait(job)["state"], "stopped")
        job.delete()
        with self.assertRaises(CohortError) as caught:
            job.refresh()
        self.assertEqual(caught.exception.status, 404)

    def test_a_share_lets_another_account_read_until_it_is_revoked(self):
        alice, bob = self.account("alice"), self.account("bob")
        src = os.path.join(self.tmp, "model.pt")
        with open(src, "wb") as f:
            f.write(os.urandom(3000))
        self.assertEqual(alice.upload(src, "store://alice-models/run1/"),
                         {"uri": "store://alice-models/run1/model.pt", "size": 3000})
        self.assertEqual(alice.list_files("store://alice-models/run1"),
                         [{"path": "model.pt", "size": 3000}])
        back = os.path.join(self.tmp, "back.pt")
        # Bob's own "alice-models" is not alice's; hers is named with its owner, and needs a share.
        for theirs in ("store://alice-models/run1/model.pt",
                       "store://alice@alice-models/run1/model.pt"):
            with self.assertRaises(CohortError) as caught:
                bob.download(theirs, back)
            self.assertEqual(caught.exception.status, 404)
        share = alice.share("store://alice-models/run1/", with_account="bob", access="read")
        self.assertEqual((share["owner"], share["with"], share["access"]),
                         ("alice", "bob", "read"))
        self.assertEqual([(s["id"], s["prefix"]) for s in bob.shares()],
                         [(share["id"], "store://alice@alice-models/run1")])
        self.assertEqual(bob.download("store://alice@alice-models/run1/model.pt", back), back)
        with open(src, "rb") as f1, open(back, "rb") as f2:
            self.assertEqual(f1.read(), f2.read())
        with self.assertRaises(CohortError) as caught:  # read is not write
            bob.upload(src, "store://alice@alice-models/run1/other.pt")
        self.assertIn(caught.exception.status, (403, 404))
        alice.unshare(share["id"])
        with self.assertRaises(CohortError) as caught:
            bob.download("store://alice@alice-models/run1/model.pt", back)
        self.assertEqual(caught.exception.status, 404)

    def test_a_new_token_works_and_a_deleted_one_does_not(self):
        alice = self.account("alice")
        created = alice.create_token("laptop")
        laptop = Client(self.url, token=created["token"], config_path=_NO_CONFIG)
        self.assertEqual(laptop.whoami()["account"], "alice")
        self.assertIn(created["id"], [t["id"] for t in alice.tokens()])
        alice.delete_token(created["id"])
        with self.assertRaises(CohortError) as caught:
            laptop.whoami()
        self.assertEqual(caught.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
