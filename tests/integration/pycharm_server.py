"""PyCharm's "Python Debug Server", as the tests play it: it listens, and a rank that
pydevd_pycharm.settrace() dials in speaks pydevd's line protocol to it, as to PyCharm.

Each message is one line, `ID<TAB>SEQ<TAB>TEXT`, TEXT URL-quoted by pydevd. The server sends the
version (501) and run (101), as PyCharm does once its breakpoints are set; waits for the rank to
say a thread is suspended (105, an XML list of frames); evaluates an expression in the top frame
(113), resumes the thread (106) and prints one JSON object: where the thread stopped, why, and
the expression's value. It then stays connected until the rank closes the connection at exit.

    pycharm_server.py --port-file PATH [--evaluate EXPR] [--leave] [--timeout S]

With --leave it goes away right after resuming, as a debug server the user stops.

It writes the port it listens on to PATH, then waits for one connection.
"""

import argparse
import json
import os
import socket
import sys
import time
import xml.etree.ElementTree as ET
from urllib.parse import quote, unquote

CMD_RUN = 101
CMD_THREAD_SUSPEND = 105
CMD_THREAD_RUN = 106
CMD_EVALUATE_EXPRESSION = 113
CMD_VERSION = 501
CMD_ERROR = 901

# pydevd's stop reasons (pydevd_comm_constants)
REASONS = {"111": "breakpoint", "122": "exception", "108": "step", "105": "suspend"}


class Connection:
    def __init__(self, sock, deadline):
        self.sock = sock
        self.buffer = b""
        self.seq = -1
        self.deadline = deadline

    def send(self, cmd, text):
        self.seq += 2
        line = "%d\t%d\t%s\n" % (cmd, self.seq, quote(text, "/<>_=\" \t"))
        self.sock.sendall(line.encode())
        return self.seq

    def receive(self, want):
        """The text of the next message whose id is in `want` (others are skipped)."""
        while True:
            while b"\n" not in self.buffer:
                self.sock.settimeout(max(0.1, self.deadline - time.time()))
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError("the rank closed the connection")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            parts = line.decode("utf-8", "replace").split("\t", 2)
            if len(parts) < 3:
                continue
            cmd = int(parts[0])
            if cmd == CMD_ERROR:
                raise RuntimeError("pydevd: " + unquote(parts[2]))
            if cmd in want:
                return cmd, unquote(parts[2])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--evaluate", default="")
    parser.add_argument("--leave", action="store_true")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    deadline = time.time() + args.timeout

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.getsockname()[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    server.settimeout(args.timeout)
    sock, _ = server.accept()
    conn = Connection(sock, deadline)
    result = {"connected": True}
    try:
        conn.send(CMD_VERSION, "1.1\tUNIX\tID")
        conn.send(CMD_RUN, "")
        _, text = conn.receive({CMD_THREAD_SUSPEND})
        thread = ET.fromstring(text).find("thread")
        frame = thread.find("frame")
        result.update({
            "stopped": REASONS.get(thread.get("stop_reason"), thread.get("stop_reason")),
            "file": unquote(frame.get("file")),
            "line": int(frame.get("line")),
            "function": unquote(frame.get("name")),
        })
        if args.evaluate:
            conn.send(CMD_EVALUATE_EXPRESSION, "%s\t%s\tFRAME\t%s\t1" % (
                thread.get("id"), frame.get("id"), args.evaluate))
            _, answer = conn.receive({CMD_EVALUATE_EXPRESSION})
            var = ET.fromstring(answer).find("var")
            result["value"] = unquote(var.get("value", "")).split(": ", 1)[-1]
        conn.send(CMD_THREAD_RUN, thread.get("id"))
    except Exception as e:
        result["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(result))
    sys.stdout.flush()
    if args.leave:
        sock.close()
        return
    try:
        conn.receive(set())
    except (EOFError, OSError, RuntimeError):
        pass


if __name__ == "__main__":
    main()
