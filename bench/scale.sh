#!/usr/bin/env bash
# Scale: 1024 sleeping ranks (4 simulated nodes x 256) launched and stopped with Ctrl-C (SIGINT).
# Per round it measures: time from starting cohort until all 1024 `sleep 600` run (process count
# polled every 10 ms), cohort's own resident memory once they run (VmRSS from /proc/<pid>/status of
# the coordinator and of each node agent; the ranks are not counted), time from
# SIGINT to cohort's exit, its exit code, and how many of its sleeps are left after it exits.
# Run: bench/scale.sh   (env: REPS=3 NODES=4 PER_NODE=256 COHORT=build/cohort)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
REPS=${REPS:-3}; NODES=${NODES:-4}; PER_NODE=${PER_NODE:-256}; TOTAL=$((NODES * PER_NODE))
TMP=$(mktemp -d /tmp/cohort-bench-scale.XXXXXX)
# The ranks run $TMP/bin/sleep, so `pgrep -f $TMP/bin/sleep` counts exactly this job's ranks.
cleanup() { pgrep -f "$TMP/" | xargs -r kill -9 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir "$TMP/bin" && ln -s /bin/sleep "$TMP/bin/sleep"
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }   # shared pages divided among sharers
mib() { awk -v k="$1" 'BEGIN {printf "%.1f MiB", k / 1024}'; }

echo "| round | ranks | launch to all running | coordinator RSS | largest agent RSS | agents | cohort total RSS | cohort total PSS | SIGINT to exit | exit code | sleeps left |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for ((round = 1; round <= REPS; round++)); do
  echo "== scale round $round/$REPS (ulimit -n $(ulimit -n))" >&2
  t0=$(date +%s%N)
  "$COHORT" run --nodes "$NODES" --nproc-per-node "$PER_NODE" --log-ranks none --data-root "$TMP/dr" \
    -- "$TMP/bin/sleep" 600 > "$TMP/out.txt" 2> "$TMP/err.txt" &
  cpid=$!
  running=0
  for ((poll = 0; poll < 6000; poll++)); do   # at most ~60 s plus the cost of the polls
    running=$(pgrep -fc "^$TMP/bin/sleep 600" || true)
    [ "$running" -ge "$TOTAL" ] && break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.01
  done
  launch_ms=$(ms_since "$t0")
  [ "$running" -ge "$TOTAL" ] || { echo "only $running of $TOTAL ranks ran" >&2; cat "$TMP/err.txt" >&2; exit 1; }

  coord=$(rss_kib "$cpid"); pss=$(pss_kib "$cpid"); agents=0; agent_max=0; agent_sum=0
  for pid in $(pgrep -P "$cpid"); do
    case "$(cat /proc/"$pid"/comm)" in "cohort node "*|cohort) ;; *) echo "unexpected child: $(tr '\0' ' ' < /proc/"$pid"/cmdline)" >&2; continue ;; esac
    kib=$(rss_kib "$pid"); agents=$((agents + 1)); agent_sum=$((agent_sum + kib)); pss=$((pss + $(pss_kib "$pid")))
    if [ "$kib" -gt "$agent_max" ]; then agent_max=$kib; fi
  done

  sleep 120 & watchdog=$!   # bounds the wait below
  t1=$(date +%s%N)
  kill -INT "$cpid"
  rc=0; wait -n -p done_pid "$cpid" "$watchdog" || rc=$?
  stop_ms=$(ms_since "$t1")
  left=$(pgrep -fc "^$TMP/bin/sleep" || true)
  if [ "$done_pid" = "$cpid" ]; then kill "$watchdog"; wait "$watchdog" || true
  else rc="none: still running after 120 s"; kill -KILL "$cpid"; wait "$cpid" || true; fi
  echo "| $round | $TOTAL | $launch_ms ms | $(mib "$coord") | $(mib "$agent_max") | $agents | $(mib $((coord + agent_sum))) | $(mib "$pss") | $stop_ms ms | $rc | $left |"
  [ "$left" = 0 ] || pgrep -f "$TMP/" | xargs -r kill -9
  rm -rf "$TMP/dr"
done
echo
echo "RSS: VmRSS (/proc/<pid>/status) of the coordinator and its $NODES agents while the $TOTAL ranks run;"
echo "PSS: the same processes' Pss (/proc/<pid>/smaps_rollup), which splits pages they share (the binary, libraries). MiB = 1024 KiB."
