#!/usr/bin/env bash
# Server throughput: `cohort server` on loopback, loaded with wrk (keep-alive, one request in
# flight per connection), default HTTP threads, a fresh data root:
#   GET  /v1/jobs/{id}   one finished job, read with an account's token (Authorization: Bearer)
#   POST /v1/jobs        submissions of 1-CPU jobs by an account with max_cpus 1 whose one CPU is
#                        held by a sleeping job, so every accepted job stays queued (none starts)
# Every response's status is counted (wrk Lua hooks). After each POST run the jobs in the store
# (GET /v1/jobs?state=queued) must have grown by the number of 201s; then the server is killed
# (SIGKILL) and started again on the same data root, and the queued count must be unchanged.
# Last, one pass of the scheduler (build/sched_bench). Prints a table and the ratios to the
# targets (GET >= 10,000/s, POST >= 1,000/s) and to the anchors (Slurm ~500 submissions/s,
# Kubernetes scheduler ~100-300 pods/s).
#   PUT  /v1/store/...   a file of UPLOAD_MIB (default 512) MiB, three times: MiB/s, and the
#                        server's peak resident memory after them
# Run: bench/server.sh   (env: GET_RUNS="1x8 2x16 2x32" POST_RUNS="1x8 2x16 2x32" DURATION=10
#                         UPLOAD_MIB=512 COHORT=build/cohort; a run is THREADSxCONNECTIONS for wrk)
# Needs wrk, curl, python3 and a built build/cohort, build/cohort-test-rank, build/sched_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath -m "${COHORT:-build/cohort}")
BUILD=$(dirname "$COHORT")
for need in "$COHORT" "$BUILD/cohort-test-rank" "$BUILD/sched_bench"; do
  [ -x "$need" ] || { echo "bench/server.sh: $need is missing: run scripts/setup first" >&2; exit 2; }
done
for tool in wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "bench/server.sh: needs $tool: run scripts/setup" >&2; exit 2; }
done
GET_RUNS=${GET_RUNS:-"1x8 2x16 2x32"}; POST_RUNS=${POST_RUNS:-"1x8 2x16 2x32"}
DURATION=${DURATION:-10}; UPLOAD_MIB=${UPLOAD_MIB:-512}
TMP=$(mktemp -d /tmp/cohort-bench-server.XXXXXX)
# The server, the job coordinators and the ranks all name $TMP/ on their command line, so
# `pgrep -f $TMP/` finds exactly this benchmark's processes.
cleanup() { pgrep -f "$TMP/" | xargs -r kill -9 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
chmod 755 "$TMP"  # a server run as root runs ranks as users of their own
mkdir "$TMP/bin"
ln -s "$BUILD/cohort-test-rank" "$TMP/bin/cohort-test-rank"

# Counts the status of every response (and, with BENCH_BODY, every request sent) and prints them
# with wrk's summary on one line starting "@@ "; one body of each status other than 200 and 201
# on lines starting "@@sample".
cat > "$TMP/count.lua" <<'EOF'
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
local post_body = os.getenv("BENCH_BODY")
if post_body then
  wrk.method = "POST"
  wrk.body = post_body
  wrk.headers["Content-Type"] = "application/json"
  function request() sent = sent + 1; return wrk.format() end
end
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {}; samples = {}; sent = 0 end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status ~= 200 and status ~= 201 and not samples[status] then samples[status] = body end
end
function done(summary, latency, requests)
  local total, all_sent = {}, 0
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do total[status] = (total[status] or 0) + n end
    for status, body in pairs(t:get("samples")) do
      io.write(string.format("@@sample %d %s\n", status, body:gsub("\n", " ")))
    end
    all_sent = all_sent + t:get("sent")
  end
  local parts = {}
  for status, n in pairs(total) do table.insert(parts, status .. ":" .. n) end
  local e = summary.errors
  io.write(string.format("@@ requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
      "sent=%d statuses=%s socket_errors=%d\n", summary.requests, summary.duration,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      all_sent, table.concat(parts, ","), e.connect + e.read + e.write + e.timeout))
end
EOF

json() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }
# api TOKEN METHOD PATH [BODY]: the response body; fails on an HTTP error. A POST always sends a
# body (Content-Length: 0 at least): the HTTP library answers 400 to a POST without Content-Length.
api() {
  if [ "$2" = POST ]; then set -- "$1" "$2" "$3" --data "${4:-}"; else set -- "$1" "$2" "$3"; fi
  curl -sSf -X "$2" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    "${@:4}" "http://127.0.0.1:$PORT$3"
}
job_body() {
  printf '{"job": {"name": "%s", "framework": "generic", "workdir": "/tmp", ' "$1"
  printf '"command": ["%s", "%s"]}}' "$TMP/bin/cohort-test-rank" "$2"
}
# wait_state TOKEN ID STATE: polls the job until it is in STATE (30 s at most).
wait_state() {
  local state
  for _ in $(seq 300); do
    state=$(api "$1" GET "/v1/jobs/$2" | json 'd["state"]')
    [ "$state" = "$3" ] && return 0
    sleep 0.1
  done
  echo "server.sh: job $2 is $state, not $3, after 30 s" >&2; return 1
}
start_server() {
  : > "$TMP/server.out"
  "$COHORT" server --listen 127.0.0.1:0 --data-root "$TMP/dr" \
    >> "$TMP/server.out" 2>> "$TMP/server.err" &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 300); do
    PORT=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$TMP/server.out")
    [ -n "$PORT" ] && return 0
    sleep 0.1
  done
  echo "server.sh: the server did not start:" >&2; cat "$TMP/server.err" >&2; return 1
}
queued() { api "$ADMIN" GET "/v1/jobs?state=queued&limit=1000000" | json 'len(d["jobs"])'; }
queue_metric() { curl -sSf "http://127.0.0.1:$PORT/metrics" | sed -n 's/^cohort_queue_length //p'; }
# load RESULT_NAME SETUP URL: one wrk run; appends its "@@" line, labelled, to $TMP/results.txt.
load() {
  local threads=${2%x*} conns=${2#*x}
  echo "== $1: wrk -t$threads -c$conns -d${DURATION}s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency -s "$TMP/count.lua" "$3" > "$TMP/wrk.txt"
  grep -v '^@@ ' "$TMP/wrk.txt" >&2
  echo "$1 $threads $conns $(sed -n 's/^@@ //p' "$TMP/wrk.txt") load=$(cut -d' ' -f1 /proc/loadavg)" \
    >> "$TMP/results.txt"
  sed -n "s/^@@sample /sample $1 -c$conns /p" "$TMP/wrk.txt" >> "$TMP/samples.txt"
}

start_server
ADMIN=$(cat "$TMP/dr/server/admin.token")
USER_TOKEN=$(api "$ADMIN" POST /v1/accounts '{"name": "bench", "max_cpus": 1}' | json 'd["token"]')

# 1. Reads of one finished job.
done_id=$(api "$USER_TOKEN" POST /v1/jobs "$(job_body done exit=0)" | json 'd["id"]')
wait_state "$USER_TOKEN" "$done_id" succeeded
for run in $GET_RUNS; do
  BENCH_TOKEN=$USER_TOKEN load get "$run" "http://127.0.0.1:$PORT/v1/jobs/$done_id"
done

# Uploads: a store file of UPLOAD_MIB PUT three times, one after the other (curl -T streams
# it); the server's resident memory at its peak after them (VmHWM).
head -c $((UPLOAD_MIB << 20)) /dev/urandom > "$TMP/upload.bin"
for i in 1 2 3; do
  seconds=$(curl -sSf -o /dev/null -w '%{time_total}' -T "$TMP/upload.bin" \
    -H "Authorization: Bearer $USER_TOKEN" "http://127.0.0.1:$PORT/v1/store/bench-up/f$i")
  echo "upload mib=$UPLOAD_MIB seconds=$seconds" >> "$TMP/results.txt"
done
echo "upload_memory peak_mib=$(( $(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$SERVER_PID/status) / 1024 ))" \
  >> "$TMP/results.txt"
rm -f "$TMP/upload.bin"

# 2. Submissions that stay queued: the account's one CPU is held by a sleeping job.
sleeper=$(api "$USER_TOKEN" POST /v1/jobs "$(job_body sleeper sleep=600)" | json 'd["id"]')
wait_state "$USER_TOKEN" "$sleeper" running
for run in $POST_RUNS; do
  before=$(queued)
  BENCH_TOKEN=$USER_TOKEN BENCH_BODY=$(job_body queued exit=0) \
    load post "$run" "http://127.0.0.1:$PORT/v1/jobs"
  sleep 1  # lets requests that were in flight when wrk stopped finish
  after=$(queued)
  sed -i "\$s/\$/ store_added=$((after - before))/" "$TMP/results.txt"
done
queued_before=$(queued); metric_before=$(queue_metric)

# Durability: SIGKILL, start again on the same data root, count again.
kill -9 "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
t0=$(date +%s%N)
start_server
restart_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
queued_after=$(queued); metric_after=$(queue_metric)
sleeper_after=$(api "$ADMIN" GET "/v1/jobs/$sleeper" | json 'd["state"]')
echo "durable queued_before=$queued_before queued_after=$queued_after metric_before=$metric_before" \
  "metric_after=$metric_after restart_ms=$restart_ms sleeper_after=$sleeper_after" >> "$TMP/results.txt"

# Stop the sleeping job, then the server; nothing of this benchmark may be left running.
api "$USER_TOKEN" POST "/v1/jobs/$sleeper/stop" > /dev/null
wait_state "$USER_TOKEN" "$sleeper" stopped
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
left=1
for _ in $(seq 300); do
  left=$(pgrep -fc "$TMP/" || true)
  [ "$left" = 0 ] && break
  sleep 0.1
done
echo "left processes=$left" >> "$TMP/results.txt"

# 3. One scheduling pass.
echo "== sched_bench (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
"$BUILD/sched_bench" > "$TMP/sched.txt"
cat "$TMP/sched.txt" >&2
echo "sched $(sed -n 's/^one pass: //p' "$TMP/sched.txt")" >> "$TMP/results.txt"

touch "$TMP/samples.txt"
python3 - "$TMP/results.txt" "$DURATION" "$TMP/samples.txt" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
samples = open(sys.argv[3]).read().splitlines()
duration = sys.argv[2]
kv = lambda line: dict(re.findall(r"(\w+)=(\S+)", line))
targets = {"get": 10000, "post": 1000}
names = {"get": "GET /v1/jobs/{id}", "post": "POST /v1/jobs"}
ms = lambda us: f"{int(us) / 1000:.1f} ms"
print("| request | wrk | load | requests/s | p50 | p90 | p99 | max | responses | target | vs target |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|")
best, checks = {}, []
for line in lines:
    kind = line.split()[0]
    if kind not in targets:
        continue
    _, threads, conns = line.split()[:3]
    d = kv(line)
    rate = int(d["requests"]) / (int(d["duration_us"]) / 1e6)
    best[kind] = max(best.get(kind, 0), rate)
    statuses = dict(s.split(":") for s in d["statuses"].split(",") if s)
    responses = ", ".join(f"{k}: {int(v):,}" for k, v in sorted(statuses.items()))
    if int(d["socket_errors"]):
        responses += f"; socket errors: {d['socket_errors']}"
    print(f"| {names[kind]} | -t{threads} -c{conns} -d{duration}s | {d['load']} | {rate:,.0f} | "
          f"{ms(d['p50_us'])} | {ms(d['p90_us'])} | {ms(d['p99_us'])} | {ms(d['max_us'])} | "
          f"{responses} | ≥ {targets[kind]:,}/s | {rate / targets[kind]:.2f}x |")
    if kind == "post":
        created = int(statuses.get("201", 0))
        unanswered = int(d["sent"]) - int(d["requests"])
        added = int(d["store_added"])
        if added == created:
            ok = "equal"
        elif created < added <= created + unanswered:
            ok = (f"ok: {added - created} more, answered after wrk stopped reading; "
                  f"{unanswered} requests were unanswered then")
        else:
            ok = f"MISMATCH: {added - created:+d}, {unanswered} requests unanswered when wrk stopped"
        checks.append(f"-c{conns}: {created:,} answered 201, {added:,} jobs added to the store "
                      f"({ok})")
print("\nload: the 1-minute load average when the run ended. Latencies are wrk's, per request.")
print("Accepted (POST runs): " + "; ".join(checks))
for line in samples:
    _, kind, conns, status, body = line.split(" ", 4)
    print(f"A {status} answer to {names[kind]} ({conns}): {body[:300]}")
uploads = [kv(l) for l in lines if l.startswith("upload ")]
if uploads:
    rates = ", ".join(f"{float(u['mib']) / float(u['seconds']):,.0f}" for u in uploads)
    peak = [kv(l) for l in lines if l.startswith("upload_memory")]
    print(f"Uploads (PUT /v1/store, {uploads[0]['mib']} MiB each, curl -T): {rates} MiB/s; the "
          f"server's peak resident memory after them: "
          f"{peak[0]['peak_mib'] if peak else '?'} MiB")
for line in lines:
    d = kv(line)
    if line.startswith("durable"):
        same = "unchanged" if d["queued_before"] == d["queued_after"] else "CHANGED"
        print(f"Durable: {int(d['queued_before']):,} queued jobs before SIGKILL, "
              f"{int(d['queued_after']):,} after the restart ({same}; cohort_queue_length "
              f"{d['metric_before']} -> {d['metric_after']}); restart to listening "
              f"{d['restart_ms']} ms; the sleeping job was {d['sleeper_after']} after it")
    if line.startswith("left"):
        print(f"Processes of the benchmark left after stopping the job and the server: "
              f"{d['processes']}")
    if line.startswith("sched"):
        print(f"Scheduler (build/sched_bench, 10,000 queued jobs, 100 nodes): {line[6:]}")
print()
for kind in ("get", "post"):
    if kind in best:
        met = "met" if best[kind] >= targets[kind] else "not met"
        print(f"{names[kind]}: best {best[kind]:,.0f}/s, target {targets[kind]:,}/s: "
              f"{best[kind] / targets[kind]:.2f}x ({met})")
if "post" in best:
    p = best["post"]
    print(f"Anchors: Slurm ~500 simple submissions/s with tuning (high-throughput guide): "
          f"{p / 500:.2f}x; Kubernetes scheduler ~100-300 pods/s: {p / 300:.1f}x-{p / 100:.1f}x")
EOF
