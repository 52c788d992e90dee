"""A client of a session's JupyterLab through cohort server's proxy, as a browser and an API
client reach it (docs/sessions.md), and as others try to: the Python standard library alone,
with a minimal WebSocket client (RFC 6455: a masked text frame out, frames in) for the kernel's
channel, which Jupyter's own clients speak.

    lab_client.py SERVER_URL JOB_ID ALICE_TOKEN BOB_TOKEN OTHER_JOB_ID

Prints one JSON object: what each attempt got (an HTTP status, or what the kernel printed).
The test (attack_test.cc) says which answer each must have.
"""
import base64
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
import uuid

server, job, alice, bob, other_job = sys.argv[1:6]
parsed = urllib.parse.urlsplit(server)
host, port = parsed.hostname, parsed.port
origin = "http://%s:%d" % (host, port)
base = "/v1/jobs/%s/session/jupyter/" % job
out = {}


def request(method, path, headers=None, body=None):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    data = None if body is None else json.dumps(body).encode()
    all_headers = dict(headers or {})
    if data is not None:
        all_headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=all_headers)
    res = conn.getresponse()
    payload = res.read()
    conn.close()
    return res.status, dict((k.lower(), v) for k, v in res.getheaders()), res.getheader("Set-Cookie"), payload


def bearer(token):
    return {"Authorization": "Bearer " + token}


class WebSocket:
    def __init__(self, path, headers):
        self.sock = socket.create_connection((host, port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: %s:%d" % (host, port), "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
        lines += ["%s: %s" % kv for kv in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0

    def send(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        frame = bytes([0x81])
        if n < 126:
            frame += bytes([0x80 | n])
        elif n < 65536:
            frame += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            frame += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        frame += mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(frame)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the WebSocket closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def receive(self):
        """The next text message (fragments joined; pings and binary frames skipped)."""
        message = b""
        while True:
            b0, b1 = self._need(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._need(2), "big")
            elif n == 127:
                n = int.from_bytes(self._need(8), "big")
            payload = self._need(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise EOFError("the WebSocket was closed")
            if opcode in (1, 0):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self):
        self.sock.close()


def run_code(path, headers, code):
    """Runs `code` in the kernel whose channels are at `path`: what it printed, or the status."""
    ws = WebSocket(path, headers)
    if ws.status != 101:
        return ws.status
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
    printed = ""
    deadline = time.time() + 120
    while time.time() < deadline:
        msg = json.loads(ws.receive())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg.get("msg_type") or msg["header"]["msg_type"]
        if kind == "stream":
            printed += msg["content"]["text"]
        elif kind == "error":
            printed += "ERROR " + msg["content"].get("ename", "") + " " + msg["content"].get("evalue", "")
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            break
    ws.close()
    return printed.strip()


# The API client: the account's token.
status, _, _, body = request("GET", base + "api/status", bearer(alice))
out["status_by_token"] = status
status, _, _, body = request("POST", base + "api/kernels", bearer(alice), {"name": "python3"})
out["kernel_started"] = status
kernel = json.loads(body)["id"] if status == 201 else ""
channels = base + "api/kernels/%s/channels" % kernel
out["kernels_listed"] = [k["id"] for k in json.loads(request("GET", base + "api/kernels", bearer(alice))[3])]
code = ("import os, torch\n"
        "print('RESULT', int(torch.tensor([6.0]).mul(7).item()), os.environ.get('COHORT_JOB_ID'))")
out["run_by_token"] = run_code(channels, bearer(alice), code)

# A browser: a ticket, then the cookie it sets.
status, _, _, body = request("POST", base + "ticket", bearer(alice), {})
out["ticket"] = status
ticket_url = json.loads(body)["url"]
status, headers, cookie, _ = request("GET", ticket_url)
out["ticket_opened"] = status
out["ticket_location"] = headers.get("location", "")
out["cookie_attributes"] = cookie or ""
jar = {"Cookie": (cookie or "").split(";")[0]}
out["lab_page_by_cookie"] = request("GET", base + "lab", jar)[0]
out["status_by_cookie"] = request("GET", base + "api/status", jar)[0]
out["run_by_cookie"] = run_code(channels, dict(jar, Origin=origin), "print('RESULT', 7*6)")

# Attacks.
out["no_credentials"] = request("GET", base + "api/status")[0]
out["no_credentials_ws"] = WebSocket(channels, {}).status
out["bob_token"] = request("GET", base + "api/status", bearer(bob))[0]
out["bob_token_ws"] = WebSocket(channels, bearer(bob)).status
out["bob_ticket"] = request("POST", base + "ticket", bearer(bob), {})[0]
out["replayed_ticket"] = request("GET", ticket_url)[0]
out["forged_ticket"] = request("GET", base + "ticket/" + "0" * 64)[0]
other_ticket = json.loads(request("POST", base + "ticket", bearer(alice), {})[3])["url"]
out["ticket_on_another_path"] = request(
    "GET", other_ticket.replace(job, other_job))[0]
out["cookie_on_another_job"] = request(
    "GET", "/v1/jobs/%s/session/jupyter/api/status" % other_job, jar)[0]
out["cookie_cross_origin_ws"] = WebSocket(channels, dict(jar, Origin="http://evil.example")).status
out["cookie_ws_without_origin"] = WebSocket(channels, jar).status
out["cookie_post_without_origin"] = request("POST", base + "api/kernels", jar, {"name": "python3"})[0]
out["cookie_cross_site"] = request("GET", base + "api/status", dict(jar, **{"Sec-Fetch-Site": "cross-site"}))[0]
out["token_cross_origin_post"] = request(
    "POST", base + "api/kernels", dict(bearer(alice), Origin="http://evil.example"), {"name": "python3"})[0]
out["forged_cookie"] = request("GET", base + "api/status", {"Cookie": "cohort_lab=" + "1" * 64})[0]
# A cookie dies with the token that asked for its ticket.
status, _, _, body = request("POST", "/v1/tokens", bearer(alice), {"label": "lab"})
second = json.loads(body)
short = json.loads(request("POST", base + "ticket", bearer(second["token"]), {})[3])["url"]
short_jar = {"Cookie": (request("GET", short)[2] or "").split(";")[0]}
out["cookie_before_revoke"] = request("GET", base + "api/status", short_jar)[0]
request("DELETE", "/v1/tokens/%s" % second["id"], bearer(alice))
out["cookie_after_revoke"] = request("GET", base + "api/status", short_jar)[0]
out["kernel_deleted"] = request("DELETE", base + "api/kernels/" + kernel, bearer(alice))[0]
print(json.dumps(out))
