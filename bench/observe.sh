#!/usr/bin/env bash
# What watching a job costs: the agents' CPU while they sample 64 ranks (4 nodes x 16, every
# rank sleeping) for SECONDS seconds, and whether the coordinator keeps up when each of the 64
# ranks logs RATE training metrics per second (cohort.log lines) for SECONDS seconds: every
# record must reach metrics.jsonl. CPU is utime+stime from /proc/PID/stat of the agents
# (the coordinator's children, "cohort node N") and of the coordinator (`cohort run`), over the
# measured interval.
# Run: bench/observe.sh   (env: SECONDS_=20 RATE=100 COHORT=build/cohort)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
DURATION=${SECONDS_:-20}; RATE=${RATE:-100}
TMP=$(mktemp -d /tmp/cohort-bench-observe.XXXXXX)
trap 'pkill -f "$TMP/" 2>/dev/null; rm -rf "$TMP"' EXIT
HZ=$(getconf CLK_TCK)

ticks() {  # pid... -> their utime+stime in clock ticks
  local sum=0 pid
  for pid in "$@"; do
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}
agents_of() { pgrep -P "$1" || true; }

# 1. Sampling: 64 sleeping ranks.
ln -s /bin/sleep "$TMP/sleep"
"$COHORT" run -q --log-ranks none --data-root "$TMP/dr1" --nodes 4 --nproc-per-node 16 \
  -- "$TMP/sleep" $((DURATION + 10)) 2>/dev/null &
run=$!
sleep 4
agents=$(agents_of "$run")
a0=$(ticks $agents); c0=$(ticks "$run"); t0=$(date +%s%N)
sleep "$DURATION"
a1=$(ticks $agents); c1=$(ticks "$run"); t1=$(date +%s%N)
kill -INT "$run"; wait "$run" 2>/dev/null || true
elapsed=$(( (t1 - t0) / 1000000 ))
samples=$(wc -l < "$TMP"/dr1/jobs/*/resources.jsonl)

# 2. Ingestion: 64 ranks, RATE cohort.log lines per second each, for DURATION seconds.
cat > "$TMP/log.py" <<PY
import time
rate, seconds = $RATE, $DURATION
start = time.monotonic()
for i in range(rate * seconds):
    print("cohort.log step=%d loss=%.6f accuracy=%.6f" % (i, 1.0 / (i + 1), i / (rate * seconds)), flush=True)
    delay = start + (i + 1) / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
PY
s=$(date +%s%N)
"$COHORT" run -q --log-ranks none --data-root "$TMP/dr2" --nodes 4 --nproc-per-node 16 \
  -- /usr/bin/python3 -S "$TMP/log.py" &
run=$!
sleep 2
c2=$(ticks "$run"); t2=$(date +%s%N)
sleep $((DURATION - 4))
c3=$(ticks "$run"); t3=$(date +%s%N)
wait "$run"
e=$(date +%s%N)
records=$(wc -l < "$TMP"/dr2/jobs/*/metrics.jsonl)

python3 - "$HZ" "$elapsed" "$a0" "$a1" "$c0" "$c1" "$samples" "$records" "$RATE" "$DURATION" \
  "$(( (e - s) / 1000000 ))" "$c2" "$c3" "$(( (t3 - t2) / 1000000 ))" <<'PY'
import sys
hz, ms, a0, a1, c0, c1, samples, records, rate, seconds, run_ms, c2, c3, ms2 = map(int, sys.argv[1:])
core = lambda t0, t1, ms=ms: 100.0 * (t1 - t0) / hz / (ms / 1000.0)
expected = 64 * rate * seconds
print("| measure | result |")
print("|---|---:|")
print(f"| 4 agents sampling 16 ranks each (every 2 s), CPU over {ms / 1000:.0f} s | {core(a0, a1):.2f}% of one core |")
print(f"| the coordinator meanwhile (storing {samples} samples) | {core(c0, c1):.2f}% of one core |")
print(f"| metric records stored, 64 ranks x {rate}/s x {seconds} s | {records} of {expected} |")
print(f"| the coordinator storing them ({64 * rate} records/s), CPU | {core(c2, c3, ms2):.1f}% of one core |")
print(f"| that job's wall time (the ranks alone take {seconds} s) | {run_ms / 1000:.1f} s |")
PY
