"""Tests for the cohort Python helpers (standard library only).

    python3 -m unittest discover -s python -t python          # helpers, with a fake environment
    COHORT_BIN=build/cohort python3 -m unittest discover -s python -t python   # and the copy
"""

import os
import shutil
import signal
import tempfile
import unittest
from unittest import mock

import cohort

_CLEAN = {k: v for k, v in os.environ.items()
          if k not in ("COHORT_RANK", "RANK", "COHORT_WORLD_SIZE", "WORLD_SIZE",
                       "COHORT_LOCAL_RANK", "LOCAL_RANK", "COHORT_OUTPUT_DIR")}


class RankHelpers(unittest.TestCase):
    def test_cohort_variables_win(self):
        env = dict(_CLEAN, COHORT_RANK="3", RANK="9", COHORT_WORLD_SIZE="4", WORLD_SIZE="9",
                   COHORT_LOCAL_RANK="1", LOCAL_RANK="9")
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual(cohort.rank(), 3)
            self.assertEqual(cohort.world_size(), 4)
            self.assertEqual(cohort.local_rank(), 1)
            self.assertFalse(cohort.is_main())

    def test_torchrun_variables_are_read_too(self):
        env = dict(_CLEAN, RANK="0", WORLD_SIZE="8", LOCAL_RANK="0")
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual(cohort.rank(), 0)
            self.assertEqual(cohort.world_size(), 8)
            self.assertTrue(cohort.is_main())

    def test_a_script_started_by_hand_is_rank_0_of_1(self):
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            self.assertEqual((cohort.rank(), cohort.world_size(), cohort.local_rank()), (0, 1, 0))
            self.assertTrue(cohort.is_main())

    def test_a_bad_value_names_the_variable(self):
        with mock.patch.dict(os.environ, dict(_CLEAN, COHORT_RANK="x"), clear=True):
            with self.assertRaisesRegex(RuntimeError, "COHORT_RANK"):
                cohort.rank()


class OutputDir(unittest.TestCase):
    def test_output_dir_is_created(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "jobs", "j1", "output")
            with mock.patch.dict(os.environ, dict(_CLEAN, COHORT_OUTPUT_DIR=path), clear=True):
                self.assertEqual(cohort.output_dir(), path)
                self.assertTrue(os.path.isdir(path))
                self.assertEqual(cohort.output_dir(), path)  # twice is fine


class Log(unittest.TestCase):
    def printed(self, *args, **kwargs):
        with mock.patch("builtins.print") as p:
            cohort.log(*args, **kwargs)
        return p.call_args[0][0]

    def test_one_line_cohort_records(self):
        self.assertEqual(self.printed(step=120, loss=0.5, accuracy=1),
                         "cohort.log step=120 loss=0.5 accuracy=1.0")
        self.assertEqual(self.printed(loss=float("nan")), "cohort.log loss=nan")

        class Scalar:  # a tensor's .item()
            def item(self):
                return 0.25
        self.assertEqual(self.printed(loss=Scalar()), "cohort.log loss=0.25")

    def test_what_is_not_a_record_is_refused(self):
        for bad in ({"step": 1.5, "loss": 1}, {"loss": "x"}, {"rank": 1}, {"t": 1},
                    {"bad key": 1}, {"loss": True}, {}):
            with self.assertRaises(ValueError, msg=bad):
                cohort.log(**bad)


class Heartbeat(unittest.TestCase):
    def setUp(self):
        cohort._heartbeat_at = 0.0
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, ".cohort-heartbeat-3")

    def test_touches_the_rank_file_and_prints_nothing(self):
        with mock.patch.dict(os.environ, {"COHORT_HEARTBEAT_FILE": self.path}), \
                mock.patch("builtins.print") as p:
            cohort.heartbeat()
            self.assertTrue(os.path.exists(self.path))
            os.utime(self.path, (1, 1))
            cohort.heartbeat()  # within a quarter second: not again
            self.assertEqual(os.stat(self.path).st_mtime, 1)
            cohort._heartbeat_at -= 1
            cohort.heartbeat()
            self.assertGreater(os.stat(self.path).st_mtime, 1)
        p.assert_not_called()

    def test_outside_cohort_or_unwritable_it_does_nothing(self):
        with mock.patch.dict(os.environ, _CLEAN, clear=True):
            cohort.heartbeat()
        with mock.patch.dict(os.environ, {"COHORT_HEARTBEAT_FILE": self.dir + "/no/such/x"}):
            cohort.heartbeat()  # no exception


class StopNotice(unittest.TestCase):
    def setUp(self):
        self.old = signal.getsignal(signal.SIGUSR1)
        self.addCleanup(signal.signal, signal.SIGUSR1, self.old)
        cohort._stop_received = False
        cohort._stop_installed = False
        cohort._stop_callbacks.clear()

    def test_the_stop_signal_comes_from_the_environment(self):
        for value, sig in (("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2), ("", signal.SIGTERM)):
            with mock.patch.dict(os.environ, {"COHORT_STOP_SIGNAL": value}):
                self.assertEqual(cohort.stop_signal(), sig)
        with mock.patch.dict(os.environ, {"COHORT_STOP_SIGNAL": "NOPE"}):
            self.assertRaises(RuntimeError, cohort.stop_signal)

    def test_stop_requested_turns_true_when_the_signal_arrives_and_callbacks_run_once(self):
        calls = []
        with mock.patch.dict(os.environ, {"COHORT_STOP_SIGNAL": "SIGUSR1"}):
            self.assertFalse(cohort.stop_requested())
            cohort.on_stop(lambda: calls.append("saved"))
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(cohort.stop_requested())
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertEqual(calls, ["saved"])
            cohort.on_stop(lambda: calls.append("late"))  # after the notice: at once
            self.assertEqual(calls, ["saved", "late"])


class CopyWithoutBinary(unittest.TestCase):
    def test_missing_binary_is_a_clear_error(self):
        env = dict(_CLEAN, PATH="/nonexistent")
        env.pop("COHORT_BIN", None)
        with mock.patch.dict(os.environ, env, clear=True):
            with self.assertRaisesRegex(RuntimeError, "COHORT_BIN"):
                cohort.copy("a", "b")


@unittest.skipUnless(os.environ.get("COHORT_BIN"), "set COHORT_BIN to the cohort binary")
class CopyWithTheRealBinary(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cohort-py-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, rel, data):
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def test_round_trip_through_the_store(self):
        self.write("src/a.bin", os.urandom(100000))
        self.write("src/sub/b.txt", b"hello")
        root = os.path.join(self.tmp, "root")
        cohort.copy(os.path.join(self.tmp, "src"), "store://datasets/demo", data_root=root)
        back = os.path.join(self.tmp, "back")
        cohort.copy("store://datasets/demo", back, workers=2, checksum=True, data_root=root)
        for rel in ("a.bin", "sub/b.txt"):
            with open(os.path.join(self.tmp, "src", rel), "rb") as f1, \
                    open(os.path.join(back, rel), "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), rel)

    def test_failure_raises_with_cohorts_message(self):
        missing = os.path.join(self.tmp, "missing")
        with self.assertRaises(RuntimeError) as caught:
            cohort.copy(missing, os.path.join(self.tmp, "dst"))
        self.assertIn("'%s': No such file or directory" % missing, str(caught.exception))
        self.assertFalse(str(caught.exception).startswith("cohort: error:"))


if __name__ == "__main__":
    unittest.main()
