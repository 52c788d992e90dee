#!/usr/bin/env bash
# The coordinator's fan-out at cluster scale, simulated on one machine: NODES node agents (real
# `cohort exec` processes, one rank each) against one coordinator, each agent on its own TCP
# connection as it would be from its own host. The last rank fails after every rank started;
# reported:
#   connect+start  from `cohort run` to "N process(es) started" (every agent dialled in,
#                  authenticated, got its plan, staged, and spawned its rank)
#   stop broadcast from the failing rank's exit to the last other rank's exit (the coordinator
#                  hears of the failure, writes one stop to every connection, every agent
#                  signals its rank and reports its exit)
#   coordinator    its peak resident memory (VmHWM)
# Run: bench/fanout.sh   (env: NODES="100 500 1000" REPS=3 HEARTBEAT=120s COHORT=build/cohort;
# the heartbeat timeout is long because 1,000 agents starting at once on 2 cores starve each other)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
RANK=$(dirname "$COHORT")/cohort-test-rank
NODES=${NODES:-"100 500 1000"}
REPS=${REPS:-3}
TMP=$(mktemp -d /tmp/cohort-bench-fanout.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

for n in $NODES; do
  for ((i = 0; i < REPS; i++)); do
    echo "== $n nodes, round $((i + 1))/$REPS" >&2
    last=$((n - 1))
    t0=$(date +%s%N)
    "$COHORT" run --data-root "$TMP/d$n-$i" --nodes "$n" --framework generic --log-ranks none \
      --heartbeat-timeout "${HEARTBEAT:-120s}" -- "$RANK" "rank$last:wait-file=$TMP/go$n-$i" "rank$last:exit=1" \
      sleep=600 > /dev/null 2> "$TMP/err" &
    runner=$!
    until grep -q "process(es) started" "$TMP/err" 2>/dev/null; do
      kill -0 "$runner" 2>/dev/null || { cat "$TMP/err" >&2; exit 1; }
      sleep 0.05
    done
    started=$(date +%s%N)
    pid=$(pgrep -f "^$COHORT run --data-root $TMP/d$n-$i" | head -1)
    sleep 1
    touch "$TMP/go$n-$i"
    peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    wait "$runner" || true
    python3 - "$TMP/d$n-$i" "$n" "$(( (started - t0) / 1000000 ))" "$peak" >> "$TMP/results.txt" <<'EOF'
import glob, json, sys
root, n, start_ms, peak_kib = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
events = [json.loads(l) for l in open(glob.glob(root + "/jobs/*/events.jsonl")[0])]
exits = [e for e in events if e["event"] == "rank_exit"]
fail = [e["exit_t"] for e in exits if e["rank"] == n - 1][0]
others = [e["exit_t"] for e in exits if e["rank"] != n - 1]
assert len(others) == n - 1, f"{len(others)} of {n - 1} ranks reported"
print(n, start_ms, (max(others) - fail) / 1e6, peak_kib // 1024)
EOF
  done
done

python3 - "$TMP/results.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, start, stop, peak = line.split()
    rows.setdefault(int(n), []).append((float(start), float(stop), int(peak)))
print(f"{'nodes':>6} {'connect+start ms':>17} {'stop broadcast ms':>18} {'coordinator MiB':>16}")
for n, rs in sorted(rows.items()):
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{n:6d} {med(0):17.0f} {med(1):18.1f} {med(2):16.0f}   (medians of {len(rs)})")
EOF
