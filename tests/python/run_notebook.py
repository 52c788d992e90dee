"""Executes examples/notebooks/distributed.ipynb with nbclient, as JupyterLab would, against a
real `cohort server` started here, and checks what its cells printed: a local 2-rank gloo job
whose ranks' lines streamed into the cell, the %%cohort magic, a failure's root cause, and the
same job submitted to the server.

    COHORT_BIN=build/cohort /usr/bin/python3 tests/notebook/run_notebook.py

Needs PyTorch, nbclient, nbformat and ipykernel for /usr/bin/python3 (Debian: python3-torch,
python3-nbclient, python3-nbformat, python3-ipykernel); ctest label "frameworks".
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(SOURCE, "examples", "notebooks", "distributed.ipynb")


def start_server(binary, data_root):
    """A server on 127.0.0.1:0; returns (process, url, admin token)."""
    process = subprocess.Popen(
        [binary, "server", "--listen", "127.0.0.1:0", "--data-root", data_root, "--cpus", "4"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        universal_newlines=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in process.stdout] + [lines.put(None)],
                     daemon=True).start()
    url, token, deadline = None, None, time.monotonic() + 30
    while url is None or token is None:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        if line is None:
            raise RuntimeError("the server exited with %s" % process.wait())
        found = re.search(r"listening on (http://\S+)", line)
        url = found.group(1) if found else url
        found = re.search(r"admin token: (\S+)", line)
        token = found.group(1) if found else token
    return process, url, token


class Notebook(unittest.TestCase):
    def test_the_example_notebook_runs_locally_then_on_a_server(self):
        import nbclient
        import nbformat

        binary = os.environ.get("COHORT_BIN")
        if not binary:
            self.skipTest("set COHORT_BIN to the cohort binary")
        tmp = tempfile.mkdtemp(prefix="cohort-notebook-test-")
        self.addCleanup(shutil.rmtree, tmp, True)
        os.chmod(tmp, 0o755)  # a server run as root runs the ranks as another user
        work = os.path.join(tmp, "notebooks")
        os.makedirs(work)
        for name in ("distributed.ipynb", "allreduce.py"):
            shutil.copy(os.path.join(os.path.dirname(NOTEBOOK), name), work)
        server, url, token = start_server(binary, os.path.join(tmp, "data"))

        def stop():
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            server.stdout.close()
        self.addCleanup(stop)

        env = {"COHORT_BIN": binary, "COHORT_SERVER": url, "COHORT_TOKEN": token,
               "COHORT_DATA_ROOT": os.path.join(tmp, "local"),
               "PYTHONPATH": os.path.join(SOURCE, "python"),
               "PYDEVD_DISABLE_FILE_VALIDATION": "1"}  # ipykernel's debugger, not used
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the kernel inherits them

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(restore)

        nb = nbformat.read(os.path.join(work, "distributed.ipynb"), as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": work}})
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            self.fail("a cell failed:\n%s" % e)

        def text(cell):
            parts = []
            for out in cell.get("outputs", []):
                if out["output_type"] == "stream":
                    parts.append(out["text"])
                elif out["output_type"] in ("execute_result", "display_data"):
                    parts.append(out["data"].get("text/plain", ""))
            return "".join(parts)

        code = [c for c in nb.cells if c.cell_type == "code"]
        run_cell = text(code[1])
        # Every rank's line came through, prefixed, and the job's RunResult is the cell's value.
        for rank, node in ((0, 0), (1, 1)):
            self.assertIn("[worker/%d node%d] rank %d/2: all-reduce sum 3" % (rank, node, rank),
                          run_cell)
        self.assertIn("cohort: job allreduce-", run_cell)
        self.assertRegex(run_cell, r"RunResult\(job_id='allreduce-[^']+', name='allreduce', "
                                   r"state='succeeded', exit_code=0")
        self.assertRegex(text(code[2]), r"\(True,\s+0,\s+'%s/local/jobs/allreduce-" % tmp)
        magic = text(code[4])
        self.assertIn("[worker/0 node0] cell rank 0: sum 30", magic)
        self.assertIn("[worker/1 node1] cell rank 1: sum 30", magic)
        self.assertIn("('succeeded', 0)", text(code[5]))
        self.assertTrue(os.path.isfile(os.path.join(work, ".cohort-cells", "cell-allreduce.py")))
        failed = text(code[6])
        self.assertIn("failed 1", failed)
        self.assertIn("worker/1 on node 1 exited with code 1", failed)
        self.assertIn("ValueError: rank 1 has no data", failed)
        submitted = text(code[7])
        for rank, node in ((0, 0), (1, 1)):
            self.assertIn("[worker/%d node%d] rank %d/2: all-reduce sum 3" % (rank, node, rank),
                          submitted)
        self.assertIn("('succeeded', 0)", submitted)


if __name__ == "__main__":
    unittest.main(verbosity=2)
