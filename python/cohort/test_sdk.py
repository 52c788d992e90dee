"""Tests for the SDK's typed answers, its exceptions, job files and workdir snapshots, and
cohort.run (standard library only).

    python3 -m unittest discover -s python/cohort -t python -p test_sdk.py
    COHORT_BIN=build/cohort python3 -m unittest ...   # cohort.run against the real binary

The snapshot tests read back what the SDK writes with tarfile and check what it refuses; the
run tests (skipped without COHORT_BIN) run real local jobs of cohort-test-rank.
"""

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
from unittest import mock

import cohort
from cohort import client as client_module
from cohort import jobfile


class Errors(unittest.TestCase):
    def test_each_status_gets_its_subclass_of_cohort_error(self):
        cases = [(400, "invalid_argument", cohort.InvalidArgument),
                 (401, "unauthenticated", cohort.Unauthenticated),
                 (403, "permission_denied", cohort.Forbidden),
                 (404, "not_found", cohort.NotFound),
                 (409, "failed_precondition", cohort.Conflict),
                 (409, "already_exists", cohort.Conflict),
                 (413, "too_large", cohort.TooLarge),
                 (500, "internal", cohort.ServerError),
                 (503, "unavailable", cohort.Unavailable)]
        for status, code, cls in cases:
            body = json.dumps({"error": {"code": code, "message": "m"}}).encode()
            e = client_module.error_from_response(status, body)
            self.assertIs(type(e), cls, (status, code))
            self.assertIsInstance(e, cohort.CohortError)
            self.assertEqual((e.status, e.code, e.message), (status, code, "m"))

    def test_a_body_that_is_not_cohorts_still_gets_the_subclass_of_its_status(self):
        self.assertIs(type(client_module.error_from_response(404, b"<html>")), cohort.NotFound)
        self.assertIs(type(client_module.error_from_response(502, b"")), cohort.Unavailable)
        self.assertIs(type(client_module.error_from_response(418, b"")), cohort.CohortError)

    def test_an_unreachable_server_is_unavailable(self):
        c = cohort.Client("http://127.0.0.1:1", token="t", config_path="/nonexistent/c.json")
        with self.assertRaises(cohort.Unavailable) as caught:
            c.whoami()
        self.assertIsNone(caught.exception.status)

    def test_errors_survive_pickling_with_their_class(self):
        e = pickle.loads(pickle.dumps(cohort.NotFound("not_found", "job 'x' not found", 404)))
        self.assertIs(type(e), cohort.NotFound)
        self.assertEqual(str(e), "job 'x' not found (HTTP 404 not_found)")


class TypedRecords(unittest.TestCase):
    RECORD = {"id": "d-1", "name": "digits", "account": "alice", "state": "failed",
              "priority": 2, "framework": "pytorch", "ranks": 4, "exit_code": 1,
              "reason": "worker/3 exited with code 1", "attempts": 1,
              "submitted": "2026-11-30T10:44:43.000Z", "started": None, "ended": None,
              "root_cause": {"name": "worker/3", "role": "worker", "rank": 3, "node": 1,
                             "exit_code": 1, "signal": 0, "tail": ["ValueError: x"],
                             "hint": "look at the tail"},
              "waiting": None, "new_field": "kept"}

    def test_a_job_record_has_typed_fields_and_reads_like_its_dict(self):
        r = cohort.JobRecord.from_dict(self.RECORD)
        self.assertEqual((r.id, r.state, r.exit_code, r.ranks), ("d-1", "failed", 1, 4))
        self.assertTrue(r.done)
        self.assertFalse(r.ok)
        self.assertIsInstance(r.root_cause, cohort.RootCause)
        self.assertEqual((r.root_cause.name, r.root_cause.node, r.root_cause.exit_code),
                         ("worker/3", 1, 1))
        # Old code that indexed the dict keeps working, and sees fields the class lacks.
        self.assertEqual(r["state"], "failed")
        self.assertEqual(r.get("new_field"), "kept")
        self.assertEqual(r["root_cause"]["tail"], ["ValueError: x"])
        self.assertEqual(r, self.RECORD)
        self.assertEqual(dict(r), self.RECORD)
        self.assertIn("reason", r)
        self.assertIn("state='failed'", repr(r))

    def test_a_root_cause_reads_like_cohort_prints_it(self):
        cause = cohort.RootCause.from_dict({"name": "worker/1", "node": 0, "code": 3,
                                            "signal": 0, "tail": ["boom"], "hint": "h"})
        self.assertEqual(cause.exit_code, 3)  # result.json's "code"
        self.assertEqual(str(cause), "worker/1 on node 0 exited with code 3\n  | boom\n  hint: h")
        self.assertIsNone(cohort.RootCause.from_dict(None))

    def test_job_wait_returns_a_job_record(self):
        answers = iter([{"id": "j", "state": "succeeded", "exit_code": 0}])

        class Fake:
            timeout = 30.0

            def _call(self, method, path, body=None, query=None, **kwargs):
                if path.endswith("/events"):
                    return {"events": [], "last_seq": 0}
                return next(answers)

        job = cohort.Job(Fake(), {"id": "j", "state": "running"})
        record = job.wait(timeout=5)
        self.assertIsInstance(record, cohort.JobRecord)
        self.assertTrue(record.ok)
        self.assertEqual(record["exit_code"], 0)
        self.assertIsInstance(job.record, dict)  # as before
        self.assertIsNone(job.root_cause)


class JobFiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-sdk-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def write(self, rel, text):
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_yaml_job_file_has_its_paths_made_absolute_against_its_directory(self):
        path = self.write("jobs/job.yaml", "name: y\nworkdir: code\ncommand: [python3, t.py]\n"
                          "inputs: [{source: data, target: d}, {source: 'store://b/p', "
                          "target: s}]\n")
        for loader in ("yaml", "none"):
            with mock.patch.object(jobfile, "_yaml", jobfile._yaml if loader == "yaml" else None):
                if loader == "yaml" and jobfile._yaml is None:
                    continue
                job, workdir = jobfile.load_job(path)
                self.assertEqual(workdir, os.path.join(self.tmp, "jobs", "code"), loader)
                if isinstance(job, dict):
                    self.assertEqual(job["inputs"][0]["source"],
                                     os.path.join(self.tmp, "jobs", "data"))
                    self.assertEqual(job["inputs"][1]["source"], "store://b/p")
                else:  # the text, with its workdir line made absolute for the server
                    self.assertIn('workdir: "%s"' % workdir, job)
                    self.assertIn("command: [python3, t.py]", job)

    def test_a_dict_or_a_text_is_taken_against_the_current_directory(self):
        with mock.patch.object(os, "getcwd", return_value=self.tmp):
            job, workdir = jobfile.load_job({"name": "d", "command": ["true"]})
            self.assertEqual((job["workdir"], workdir), (self.tmp, self.tmp))
            with mock.patch.object(jobfile, "_yaml", None):
                text, workdir = jobfile.load_job("name: t\ncommand: [true]\n")
            self.assertEqual(workdir, self.tmp)
            self.assertTrue(text.startswith('workdir: "%s"\n' % self.tmp), text)

    def test_bad_job_files_are_named(self):
        path = self.write("bad.json", "{nope")
        with self.assertRaisesRegex(jobfile.JobFileError, "job file '%s'" % path):
            jobfile.load_job(path)
        with self.assertRaisesRegex(jobfile.JobFileError, "not a mapping"):
            jobfile.load_job("[1, 2]\n" if jobfile._yaml else "{\"a\": [}")

    def test_submit_of_a_job_file_to_a_remote_server_uploads_its_workdir(self):
        self.write("jobs/code/train.py", "print('hi')\n")
        self.write("jobs/code/.gitignore", "*.log\n")
        self.write("jobs/code/run.log", "noise\n")
        path = self.write("jobs/job.json", json.dumps({"name": "j", "workdir": "code",
                                                      "command": ["python3", "train.py"]}))
        c = cohort.Client("http://gpu-box:8600", token="t", config_path="/nonexistent/c.json")
        sent = []

        def fake_call(method, route, body=None, query=None, data=None, **kwargs):
            if route == "/v1/uploads":
                data.seek(257)
                magic = data.read(8)  # of the first header: POSIX ustar, what the server reads
                data.seek(0)
                with tarfile.open(fileobj=data) as tar:
                    sent.append(("upload", sorted(tar.getnames()), magic))
                return {"id": "up-" + "a" * 24, "files": 2, "dirs": 0, "links": 0, "bytes": 18}
            sent.append((route, body))
            return {"id": "j-1", "state": "queued"}

        c._call = fake_call
        self.assertEqual(c.submit(path).id, "j-1")
        self.assertEqual(sent[0], ("upload", [".gitignore", "train.py"], b"ustar\x0000"))
        self.assertEqual(sent[1][1]["code"], "up-" + "a" * 24)
        self.assertEqual(sent[1][1]["job"]["workdir"], os.path.join(self.tmp, "jobs", "code"))
        # A server on this machine reads the workdir where it is; upload=True uploads anyway.
        local = cohort.Client("http://127.0.0.1:8600", token="t", config_path="/x/c.json")
        local._call = fake_call
        sent.clear()
        local.submit(path)
        self.assertEqual([s[0] for s in sent], ["/v1/jobs"])
        self.assertNotIn("code", sent[0][1])
        sent.clear()
        local.submit(path, upload=True)
        self.assertEqual([s[0] for s in sent], ["upload", "/v1/jobs"])


class Snapshots(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-sdk-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.work = os.path.join(self.tmp, "work")
        os.makedirs(self.work)

    def write(self, rel, data=b"x"):
        path = os.path.join(self.work, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def names(self, max_bytes=1 << 20):
        out = io.BytesIO()
        snap = jobfile.write_snapshot(self.work, out, max_bytes)
        with tarfile.open(fileobj=out) as tar:
            return sorted(tar.getnames()), snap

    def test_ignore_rules_match_as_the_servers_client_does(self):
        rules = jobfile.IgnoreRules("*.pyc\n/build\ndocs/*.md\n**/tmp/\ndata/\n!important.pyc\n")
        for rel, is_dir, want in [("a.pyc", False, True), ("deep/er/b.pyc", False, True),
                                  ("important.pyc", False, False), ("build", True, True),
                                  ("src/build", True, False), ("docs/x.md", False, True),
                                  ("docs/sub/x.md", False, False), ("a/b/tmp", True, True),
                                  ("tmp", True, True), ("tmp", False, False),
                                  ("x/data", True, True), (".git", True, True),
                                  ("train.py", False, False)]:
            self.assertEqual(rules.ignored(rel, is_dir), want, rel)

    def test_cohortignore_wins_over_gitignore_and_git_is_always_left_out(self):
        for rel in ("train.py", "data/big.bin", "keep.bin", ".git/HEAD", "w.bin"):
            self.write(rel)
        self.write(".cohortignore", b"data/\n*.bin\n!keep.bin\n")
        self.write(".gitignore", b"train.py\n")
        names, snap = self.names()
        self.assertEqual(names, [".cohortignore", ".gitignore", "keep.bin", "train.py"])
        self.assertEqual(snap.ignore_file, os.path.join(self.work, ".cohortignore"))

    def test_over_the_limit_names_the_biggest_files_and_how_to_raise_it(self):
        self.write("small.py")
        self.write("data/huge.bin", b"h" * 3000)
        with self.assertRaises(OverflowError) as caught:
            self.names(max_bytes=1000)
        message = str(caught.exception)
        self.assertIn("over the 1000 B limit; the biggest: data/huge.bin (2.9 KiB)", message)
        self.assertIn("max_upload=BYTES", message)
        self.assertIn("add a .cohortignore", message)

    def test_a_link_leading_out_is_refused_and_one_inside_is_kept(self):
        self.write("pkg/m.py")
        os.symlink("pkg/m.py", os.path.join(self.work, "m.py"))
        names, _ = self.names()
        self.assertIn("m.py", names)
        os.symlink("../../etc", os.path.join(self.work, "pkg", "up"))
        with self.assertRaisesRegex(ValueError, "pkg/up' cannot be uploaded: its target "
                                                "'../../etc' leads out of the workdir"):
            self.names()

    def test_submit_says_too_large_with_the_servers_kind_of_error(self):
        self.write("big.bin", b"b" * 5000)
        c = cohort.Client("http://gpu-box:8600", token="t", config_path="/nonexistent/c.json")
        c._call = lambda *a, **k: self.fail("nothing may be sent")
        with self.assertRaises(cohort.TooLarge):
            c.submit({"name": "b", "workdir": self.work, "command": ["true"]}, max_upload=100)


def _binary():
    return os.environ.get("COHORT_BIN")


@unittest.skipUnless(_binary(), "set COHORT_BIN to a cohort binary to run local jobs")
class Run(unittest.TestCase):
    """cohort.run against the real binary, with cohort-test-rank as the ranks."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-run-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        rank = os.environ.get("COHORT_TEST_RANK_BIN") or os.path.join(
            os.path.dirname(os.path.abspath(_binary())), "cohort-test-rank")
        if not os.access(rank, os.X_OK):
            self.skipTest("no cohort-test-rank beside COHORT_BIN")
        self.rank = rank

    def job(self, *actions, procs=2):
        return {"name": "t", "framework": "generic", "workdir": self.tmp,
                "command": [self.rank] + list(actions),
                "roles": {"worker": {"nodes": 1, "procs_per_node": procs}}}

    def run_job(self, job, *args, **kwargs):
        out, err = io.StringIO(), io.StringIO()
        result = cohort.run(job, *args, data_root=os.path.join(self.tmp, "data"), stdout=out,
                            stderr=err, **kwargs)
        return result, out.getvalue(), err.getvalue()

    def test_the_ranks_lines_stream_prefixed_and_the_result_is_returned(self):
        result, out, err = self.run_job(self.job("echo=hello"))
        self.assertIn("[worker/0 node0] hello\n", out)
        self.assertIn("[worker/1 node0] hello\n", out)
        self.assertIn("cohort: job t-", err)
        self.assertIsInstance(result, cohort.RunResult)
        self.assertTrue(result.ok)
        self.assertEqual((result.state, result.exit_code, result.root_cause),
                         ("succeeded", 0, None))
        self.assertEqual(result["state"], "succeeded")  # also a dict of result.json
        self.assertTrue(os.path.isfile(os.path.join(result.job_dir, "result.json")))
        self.assertEqual(result.log("worker", 1), "hello\n")
        self.assertEqual(result.job["command"][1:], ["echo=hello"])

    def test_a_failure_comes_back_with_its_root_cause(self):
        result, _, _ = self.run_job(self.job("rank1:echo=dying", "rank1:exit=3", "sleep=30"))
        self.assertEqual((result.state, result.exit_code), ("failed", 3))
        self.assertEqual((result.root_cause.name, result.root_cause.exit_code), ("worker/1", 3))
        self.assertIn("dying", result.root_cause.tail)
        with self.assertRaises(cohort.JobFailed) as caught:
            self.run_job(self.job("exit=4", procs=1), check=True)
        self.assertEqual(caught.exception.result.exit_code, 4)

    def test_nodes_override_the_job_file_and_a_bad_job_is_invalid_argument(self):
        result, out, _ = self.run_job(self.job("echo=up", procs=1), nodes=2)
        self.assertIn("[worker/1 node1] up", out)
        with self.assertRaises(cohort.InvalidArgument) as caught:
            self.run_job({"name": "bad", "workdir": self.tmp, "command": [self.rank],
                          "roles": {"worker": {"nodes": 0}}})
        self.assertIn("roles.worker.nodes", str(caught.exception))

    def test_a_function_runs_as_every_ranks_script(self):
        def hello(greeting):
            import os
            print(greeting, os.environ["RANK"], flush=True)
            if os.environ["RANK"] == "1":
                return {"greeting": greeting, "rank": 1}

        result, out, _ = self.run_job(hello, "hi", nodes=1, nproc_per_node=2,
                                      workdir=self.tmp, python=sys.executable)
        self.assertTrue(result.ok, out)
        self.assertIn("[worker/1 node0] hi 1", out)
        # What each rank returned, by rank; rank 0 returned None.
        self.assertEqual(result.returns, [None, {"greeting": "hi", "rank": 1}])
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, ".cohort-cells", "hello.py")))
        self.assertEqual(result.job["command"][1], os.path.join(".cohort-cells", "hello.py"))

    def test_the_cell_magic_runs_the_cell_and_keeps_the_result(self):
        ns = {}
        with mock.patch.object(os, "getcwd", return_value=self.tmp), \
                mock.patch.dict(os.environ, {"COHORT_DATA_ROOT": os.path.join(self.tmp, "d")}), \
                mock.patch.object(sys, "stdout", io.StringIO()) as out, \
                mock.patch.object(sys, "stderr", io.StringIO()):
            result = cohort.local.cohort_cell("--nodes 2 --name cellt --out r",
                                              "import os\nprint('cell', os.environ['RANK'])", ns)
        self.assertIs(ns["r"], result)
        self.assertTrue(result.ok)
        self.assertIn("[worker/1 node1] cell 1", out.getvalue())


if __name__ == "__main__":
    unittest.main()
