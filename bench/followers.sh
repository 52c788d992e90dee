#!/usr/bin/env bash
# Log followers: `cohort server` on loopback with FOLLOWERS (default 1,000) concurrent
# `GET /v1/jobs/{id}/logs?follow=1` streams of one running job attached (each a keep-alive
# connection that waits for the next line), and wrk reading `GET /v1/jobs/{id}` of another job
# meanwhile; then the same wrk run with no follower attached. Default HTTP threads (32): with a
# thread per follower, 1,000 followers would leave none. Checks that every follower is attached
# before the run (each got the job's first line) and still attached after it, and that each gets
# the job's last line and the end of its stream when the job is let go. Prints p50/p99 latency
# and requests/s of both runs (target: p99 under 50 ms with the followers attached).
# Then strangers: IDLE (default 10,000) connections from 127.0.0.2-127.0.0.41, half of them
# silent, half slowloris (a header byte every second, connecting again when cut off), and the
# same wrk run beside them (target: p99 under 50 ms).
# Run: bench/followers.sh   (env: FOLLOWERS=1000 IDLE=10000 DURATION=10 WRK=1x8 COHORT=build/cohort;
#                            WRK is THREADSxCONNECTIONS; mind the cores: -t1 or -t2)
# Needs wrk, curl, python3 and a built build/cohort and build/cohort-test-rank.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath -m "${COHORT:-build/cohort}")
BUILD=$(dirname "$COHORT")
for need in "$COHORT" "$BUILD/cohort-test-rank"; do
  [ -x "$need" ] || { echo "bench/followers.sh: $need is missing: build it first" >&2; exit 2; }
done
for tool in wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "bench/followers.sh: needs $tool" >&2; exit 2; }
done
FOLLOWERS=${FOLLOWERS:-1000}; DURATION=${DURATION:-10}; WRK=${WRK:-1x8}; IDLE=${IDLE:-10000}
TMP=$(mktemp -d /tmp/cohort-bench-followers.XXXXXX)
# The server, the coordinators and the ranks all name $TMP/ on their command line.
cleanup() { pgrep -f "$TMP/" | xargs -r kill -9 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
chmod 755 "$TMP"  # a server run as root runs ranks as users of their own
mkdir "$TMP/bin" "$TMP/work"
ln -s "$BUILD/cohort-test-rank" "$TMP/bin/cohort-test-rank"
ulimit -n "$(ulimit -Hn)"

cat > "$TMP/auth.lua" <<'EOF'
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("@@ requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d " ..
      "non2xx=%d socket_errors=%d\n", summary.requests, summary.duration,
      latency:percentile(50), latency:percentile(99), latency.max, e.status,
      e.connect + e.read + e.write + e.timeout))
end
EOF

json() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }
api() {
  if [ "$2" = POST ]; then set -- "$1" "$2" "$3" --data "${4:-}"; else set -- "$1" "$2" "$3"; fi
  curl -sSf -X "$2" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    "${@:4}" "http://127.0.0.1:$PORT$3"
}
job_body() {  # NAME ACTION...
  local name=$1; shift
  local args=""
  for a in "$@"; do args="$args, \"$a\""; done
  printf '{"job": {"name": "%s", "framework": "generic", "workdir": "%s", ' "$name" "$TMP/work"
  printf '"command": ["%s"%s]}}' "$TMP/bin/cohort-test-rank" "$args"
}
# wait_state ID STATE: the job's events, long-polled, until the record is in STATE (60 s).
wait_state() {
  local state after=0
  for _ in $(seq 60); do
    state=$(api "$ADMIN" GET "/v1/jobs/$1" | json 'd["state"]')
    [ "$state" = "$2" ] && return 0
    after=$(api "$ADMIN" GET "/v1/jobs/$1/events?after=$after&wait=1s" | json 'd["last_seq"]')
  done
  echo "followers.sh: job $1 is $state, not $2" >&2; return 1
}

# Room for the followers where the server caps an account's followers and an address's
# connections (a cohort with the caps; an older one has none).
limits=()
if "$COHORT" server --help | grep -q -- --max-followers; then
  limits=(--max-followers $((FOLLOWERS + 100)) --max-connections $((FOLLOWERS + IDLE + 1000))
          --max-connections-per-address $((FOLLOWERS + 200)))
fi
"$COHORT" server --listen 127.0.0.1:0 --data-root "$TMP/dr" "${limits[@]}" \
  > "$TMP/server.out" 2> "$TMP/server.err" &
SERVER_PID=$!
PORT=""
for _ in $(seq 300); do
  PORT=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$TMP/server.out")
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "followers.sh: the server did not start" >&2; cat "$TMP/server.err" >&2; exit 1; }
ADMIN=$(cat "$TMP/dr/server/admin.token")

read_id=$(api "$ADMIN" POST /v1/jobs "$(job_body read exit=0)" | json 'd["id"]')
wait_state "$read_id" succeeded
followed=$(api "$ADMIN" POST /v1/jobs \
  "$(job_body followed echo=first "wait-file=$TMP/work/go" echo=last)" | json 'd["id"]')
wait_state "$followed" running

run_wrk() {  # LABEL
  local threads=${WRK%x*} conns=${WRK#*x}
  echo "== $1: wrk -t$threads -c$conns -d${DURATION}s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  BENCH_TOKEN=$ADMIN wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency -s "$TMP/auth.lua" \
    "http://127.0.0.1:$PORT/v1/jobs/$read_id" > "$TMP/wrk.txt"
  grep -v '^@@ ' "$TMP/wrk.txt" >&2
  echo "$1 $threads $conns $(sed -n 's/^@@ //p' "$TMP/wrk.txt")" >> "$TMP/results.txt"
}

# The followers: one process, one socket each, all attached before wrk starts. It says
# "attached" when every follower got the job's first line, then holds them until stdin closes,
# then lets the job go and checks that every follower got the last line and its stream's end.
mkfifo "$TMP/hold"
python3 - "$PORT" "$ADMIN" "$followed" "$FOLLOWERS" "$TMP/work/go" < "$TMP/hold" > "$TMP/followers.out" <<'EOF' &
import selectors, socket, sys, time
port, token, job, count, gate = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
request = ("GET /v1/jobs/%s/logs?follow=1&rank=0 HTTP/1.1\r\nHost: bench\r\n"
           "Authorization: Bearer %s\r\n\r\n" % (job, token)).encode()
sel = selectors.DefaultSelector()
got = {}
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(request)
    s.setblocking(False)
    got[s] = b""
    sel.register(s, selectors.EVENT_READ)
def pump(until, deadline):
    while time.monotonic() < deadline and not all(until(v) for v in got.values()):
        for key, _ in sel.select(timeout=1):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fileobj)
                got[key.fileobj] += b"<closed>"
            got[key.fileobj] += data
t0 = time.monotonic()
pump(lambda v: b"first" in v, time.monotonic() + 120)
attached = sum(b"first" in v and b"<closed>" not in v for v in got.values())
print("attached %d of %d in %.1f s" % (attached, count, time.monotonic() - t0), flush=True)
sys.stdin.read()  # held until the runs are over
still = sum(b"<closed>" not in v for v in got.values())
open(gate, "w").write("go\n")
t0 = time.monotonic()
pump(lambda v: v.endswith(b"0\r\n\r\n"), time.monotonic() + 120)
ended = sum(b"last" in v and v.endswith(b"0\r\n\r\n") for v in got.values())
print("still_attached %d last_line_and_end %d in %.1f s" % (still, ended, time.monotonic() - t0),
      flush=True)
EOF
FOLLOWERS_PID=$!
exec 9> "$TMP/hold"
for _ in $(seq 1200); do
  grep -q '^attached' "$TMP/followers.out" && break
  sleep 0.1
done
cat "$TMP/followers.out" >&2
echo "followers $(sed -n 's/^attached \([0-9]*\) of \([0-9]*\) in \(.*\) s/attached=\1 of=\2 seconds=\3/p' \
  "$TMP/followers.out") connections=$(curl -sS "http://127.0.0.1:$PORT/metrics" | \
  sed -n 's/^cohort_http_connections //p') threads=$(ls /proc/$SERVER_PID/task | wc -l)" >> "$TMP/results.txt"
run_wrk with_followers
exec 9>&-  # lets the followers go
wait "$FOLLOWERS_PID"
cat "$TMP/followers.out" >&2
echo "after $(sed -n 's/^still_attached \([0-9]*\) last_line_and_end \([0-9]*\) in \(.*\) s/still_attached=\1 ended=\2 seconds=\3/p' \
  "$TMP/followers.out")" >> "$TMP/results.txt"
wait_state "$followed" succeeded
run_wrk no_followers

# Strangers: silent connections and slowloris ones, held (and made again when the server cuts
# them off) while wrk runs beside them.
python3 - "$PORT" "$IDLE" "$((DURATION + 15))" < /dev/null > "$TMP/idle.out" 2>&1 <<'PYTHON' &
import selectors, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
sel = selectors.DefaultSelector()
conns = {}  # socket -> [slowloris, header bytes sent, index]
head = b"GET /v1/whoami HTTP/1.1\r\nHost: bench\r\nX-Slow: " + b"a" * 100000
made = cut = refused = 0
def connect(i):
    global made, refused
    s = socket.socket()
    s.setblocking(False)
    try:
        s.bind(("127.0.0.%d" % (2 + i % 40), 0))
        s.connect_ex(("127.0.0.1", port))
    except OSError:
        refused += 1
        s.close()
        return
    made += 1
    conns[s] = [i % 2 == 1, 0, i]
    sel.register(s, selectors.EVENT_READ)
for i in range(count):
    connect(i)
print("open %d" % len(conns), flush=True)
end = time.monotonic() + seconds
next_byte = time.monotonic()
low = len(conns)
while time.monotonic() < end:
    for key, _ in sel.select(timeout=0.2):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:  # cut off: come back
            sel.unregister(s)
            i = conns.pop(s)[2]
            s.close()
            cut += 1
            connect(i)
    if time.monotonic() >= next_byte:
        next_byte += 1
        for s, state in conns.items():
            if state[0]:
                try:
                    s.send(head[state[1]:state[1] + 1])
                    state[1] += 1
                except OSError:
                    pass
    low = min(low, len(conns))
print("held_at_least=%d connections_made=%d cut_off=%d refused=%d" % (low, made, cut, refused),
      flush=True)
PYTHON
IDLE_PID=$!
for _ in $(seq 600); do
  grep -q '^open' "$TMP/idle.out" && break
  sleep 0.1
done
sleep 2
echo "idle strangers=$IDLE server_connections=$(curl -sS "http://127.0.0.1:$PORT/metrics" | \
  sed -n 's/^cohort_http_connections //p')" >> "$TMP/results.txt"
run_wrk with_strangers
wait "$IDLE_PID" || true
echo "idle_after $(tail -1 "$TMP/idle.out")" >> "$TMP/results.txt"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true

python3 - "$TMP/results.txt" "$DURATION" "$FOLLOWERS" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
kv = lambda line: dict(re.findall(r"(\w+)=(\S+)", line))
ms = lambda us: f"{int(us) / 1000:.2f} ms"
for line in lines:
    if line.startswith(("followers", "after", "idle")):
        print("# " + line)
print("| GET /v1/jobs/{id} | wrk | requests/s | p50 | p99 | max | non-2xx | socket errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for line in lines:
    kind = line.split()[0]
    if kind not in ("with_followers", "no_followers", "with_strangers"):
        continue
    _, threads, conns = line.split()[:3]
    d = kv(line)
    rate = int(d["requests"]) / (int(d["duration_us"]) / 1e6)
    label = {"with_followers": f"{int(sys.argv[3]):,} followers attached",
             "no_followers": "no followers",
             "with_strangers": "silent and slowloris strangers attached"}[kind]
    print(f"| {label} | -t{threads} -c{conns} -d{sys.argv[2]}s | {rate:,.0f} | {ms(d['p50_us'])} | "
          f"{ms(d['p99_us'])} | {ms(d['max_us'])} | {d['non2xx']} | {d['socket_errors']} |")
EOF
