"""What attack_test.cc's session test runs inside a session (as the session's user, logged in
with ssh through the server), with no setup of its own: `import cohort` and `cohort` as the
session gives them.

    session_run.py sdk        cohort.run(fn, nproc_per_node=2): a 2-rank gloo all-reduce, and
                              what the function returned on each rank
    session_run.py notebook   a notebook whose %%cohort cell runs the same, executed with
                              nbclient against an ipykernel of this Python
    session_run.py escape DATA_ROOT JOB PORT
                              a rank of a run in the session tries to leave it: it writes to
                              the server's data root and the session's record, replaces the
                              server's binary, reaches the server's API; one line per attempt,
                              "ATTEMPT <name> <ok|blocked> <detail>"

Each rank reports one line, "<tag> rank R sum S pid:[..] net:[..] uid U cgroup C", that the
test compares with the session's own namespaces and cgroup, read from the machine.
"""

import inspect
import json
import os
import sys


def allreduce(tag):
    """Every rank's body for cohort.run: the all-reduce; returns its result for the caller."""
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([10.0 * (dist.get_rank() + 1)])
    dist.all_reduce(value)
    cgroup = ";".join(line for line in open("/proc/self/cgroup").read().splitlines()
                      if ":cpu," in line or ":memory:" in line or line.startswith("0::"))
    print("%s rank %d sum %d %s %s uid %d cgroup %s" % (
        tag, dist.get_rank(), value.item(), os.readlink("/proc/self/ns/pid"),
        os.readlink("/proc/self/ns/net"), os.getuid(), cgroup), flush=True)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return {"rank": rank, "sum": value.item()}


def sdk():
    import cohort

    result = cohort.run(allreduce, "sdk", nproc_per_node=2)
    print("state", result.state, result.exit_code)
    print("job_dir", result.job_dir)
    for value in result.returns:
        print("result", json.dumps(value, sort_keys=True))
    return 0 if result.ok else 1


def notebook():
    import nbclient
    import nbformat

    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext cohort"),
        nbformat.v4.new_code_cell("%%cohort --nproc-per-node 2 --name cell\n" +
                                  inspect.getsource(allreduce) + "\nallreduce('notebook')\n"),
        nbformat.v4.new_code_cell("print('cell state', cohort_result.state)"),
    ]
    client = nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": os.getcwd()}})
    client.execute()
    for cell in book.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                sys.stdout.write(output.get("text", ""))
            elif output.get("output_type") == "error":
                print("error", output.get("ename"), output.get("evalue"))
    return 0


def escape():
    import socket

    data_root, job, port = sys.argv[2], sys.argv[3], int(sys.argv[4])

    def attempt(name, action):
        try:
            detail = action()
            print("ATTEMPT %s ok %s" % (name, detail), flush=True)
        except OSError as e:
            print("ATTEMPT %s blocked %s" % (name, e), flush=True)

    def write(path):
        def action():
            with open(path, "a") as f:
                f.write("planted\n")
            return path
        return action

    attempt("data-root", write(os.path.join(data_root, "planted")))
    attempt("jobs", write(os.path.join(data_root, "jobs", "planted")))
    attempt("record", write(os.path.join(data_root, "jobs", job, "events.jsonl")))
    # Opened for writing only (not written): where it could be, the test fails all the same.
    attempt("binary", lambda: os.close(os.open(os.environ["COHORT_BIN"], os.O_WRONLY)))
    attempt("api", lambda: socket.create_connection(("127.0.0.1", port), 2).getpeername())
    return 0


if __name__ == "__main__":
    sys.exit({"sdk": sdk, "notebook": notebook, "escape": escape}[sys.argv[1]]())
