"""A small Debug Adapter Protocol client, as VS Code's "attach" speaks it, for the debug tests.

    dap_client.py --port P [--breakpoint FILE:LINE] [--evaluate EXPR] [--hold-until FILE]
                  [--then continue|disconnect] [--timeout S] [--no-stop] [--just-my-code 0|1]
                  [--after]

Attaches to the debugpy listening on 127.0.0.1:P (initialize, attach, setBreakpoints,
setExceptionBreakpoints ["uncaught"], configurationDone), waits for a `stopped` event, reads the
top frame (stackTrace) and evaluates EXPR in it, waits until FILE exists (when given), then
continues or disconnects. Prints one JSON object on stdout: {"stopped": reason, "file", "line",
"function", "value", "exception", "stack": ["FILE:FUNCTION", ...]}; exits 1 with a message on
stderr when anything fails. With --after, once continued it waits for what comes next and says
it in "after": "stopped" (with "after_reason"), "exited" or "terminated", or "closed" when the
debuggee went away.
With --no-stop it attaches, waits for --hold-until, and disconnects without waiting to stop.
"""

import argparse
import json
import os
import socket
import sys
import time


class Dap:
    def __init__(self, port, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.seq = 0
        self.events = []

    def send(self, command, **arguments):
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def read(self):
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the debug adapter closed the connection")
            self.buf += chunk
        header, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = int([h for h in header.split(b"\r\n")
                      if h.lower().startswith(b"content-length")][0].split(b":")[1])
        while len(self.buf) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the debug adapter closed the connection")
            self.buf += chunk
        body, self.buf = self.buf[:length], self.buf[length:]
        return json.loads(body)

    def response(self, seq):
        while True:
            m = self.read()
            if m.get("type") == "response" and m.get("request_seq") == seq:
                if not m.get("success"):
                    raise RuntimeError("%s failed: %s" % (m.get("command"), m.get("message")))
                return m.get("body", {})
            if m.get("type") == "event":
                self.events.append(m)

    def request(self, command, **arguments):
        return self.response(self.send(command, **arguments))

    def event(self, name):
        for i, m in enumerate(self.events):
            if m.get("event") == name:
                return self.events.pop(i)
        while True:
            m = self.read()
            if m.get("type") == "event" and m.get("event") == name:
                return m
            if m.get("type") == "event":
                self.events.append(m)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--breakpoint", action="append", default=[])
    p.add_argument("--evaluate")
    p.add_argument("--hold-until")
    p.add_argument("--then", choices=["continue", "disconnect"], default="continue")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--no-stop", action="store_true")
    p.add_argument("--just-my-code", type=int, choices=[0, 1], default=1)
    p.add_argument("--after", action="store_true")
    args = p.parse_args()

    dap = Dap(args.port, args.timeout)
    dap.request("initialize", clientID="cohort-test", adapterID="debugpy", pathFormat="path",
                linesStartAt1=True, columnsStartAt1=True)
    attach = dap.send("attach", justMyCode=bool(args.just_my_code))
    dap.event("initialized")
    by_file = {}
    for b in args.breakpoint:
        path, line = b.rsplit(":", 1)
        by_file.setdefault(path, []).append(int(line))
    for path, lines in by_file.items():
        dap.request("setBreakpoints", source={"path": path},
                    breakpoints=[{"line": n} for n in lines])
    dap.request("setExceptionBreakpoints", filters=["uncaught"])
    dap.request("configurationDone")
    dap.response(attach)
    out = {}
    if not args.no_stop:
        stopped = dap.event("stopped")["body"]
        out["stopped"] = stopped.get("reason")
        thread = stopped.get("threadId")
        frames = dap.request("stackTrace", threadId=thread, startFrame=0, levels=20)["stackFrames"]
        out["stack"] = ["%s:%s" % (f.get("source", {}).get("path", ""), f.get("name"))
                        for f in frames]
        top = frames[0]
        out["file"] = top.get("source", {}).get("path", "")
        out["line"] = top.get("line")
        out["function"] = top.get("name")
        if args.evaluate:
            out["value"] = dap.request("evaluate", expression=args.evaluate, frameId=top["id"],
                                       context="repl")["result"]
        if out["stopped"] == "exception":
            out["exception"] = dap.request("exceptionInfo", threadId=thread).get("exceptionId")
    if args.hold_until:
        deadline = time.monotonic() + args.timeout
        while not os.path.exists(args.hold_until):
            if time.monotonic() > deadline:
                raise TimeoutError("%s did not appear" % args.hold_until)
            time.sleep(0.05)
    if args.then == "continue" and not args.no_stop:
        dap.request("continue", threadId=thread)
        if args.after:
            try:
                while True:
                    m = dap.events.pop(0) if dap.events else dap.read()
                    if m.get("type") == "event" and m.get("event") in ("stopped", "exited",
                                                                        "terminated"):
                        out["after"] = m["event"]
                        out["after_reason"] = m.get("body", {}).get("reason", "")
                        break
            except (EOFError, OSError):
                out["after"] = "closed"
            if out["after"] != "stopped":
                dap.sock.close()
                print(json.dumps(out), flush=True)
                return
    dap.request("disconnect", terminateDebuggee=False)
    dap.sock.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        sys.stderr.write("dap_client: %s: %s\n" % (type(e).__name__, e))
        sys.exit(1)
