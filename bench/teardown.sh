#!/usr/bin/env bash
# Failure teardown: 64 sleeping ranks, one fails after 1 s; time from the failing rank's exit to
# the launcher's exit (every other rank stopped), repeated REPS times, launchers interleaved:
#   cohort     --nodes 4 --nproc-per-node 16, rank 63 (last node) fails; two rank programs:
#              cohort-test-rank (start = "t" of rank 63's rank_exit in events.jsonl) and the same
#              sh script the peers run (start = the time it writes just before exiting)
#   wait -n    bash: 63 sleeps + 1 failing sh in the background, wait -n, kill the rest, wait
#   mpirun     -np 64, rank 63 fails (OMPI_COMM_WORLD_RANK)
#   torchrun   --standalone --nproc_per_node 16 (64 is too heavy for it here), local rank 15 fails
# End = `date +%s%N` right after the launcher returns. Also counts the job's processes left over.
#   before     with BASELINE=path/to/an/earlier/cohort: that build, as cohort-test-rank above
# Run: bench/teardown.sh   (env: REPS=15 COHORT=build/cohort TORCHRUN=1 BASELINE=)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
REPS=${REPS:-15}; TORCHRUN=${TORCHRUN:-1}
TMP=$(mktemp -d /tmp/cohort-bench-teardown.XXXXXX)
# Every rank runs a program under $TMP, so `pgrep -f $TMP/` finds exactly this benchmark's processes.
cleanup() { pgrep -f "$TMP/" | xargs -r kill -9 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir "$TMP/bin"
ln -s "$(dirname "$COHORT")/cohort-test-rank" "$TMP/bin/cohort-test-rank"
ln -s /bin/sleep "$TMP/bin/sleep"

# The peers' rank: the rank numbered $1 sleeps 1 s, writes the time to $2 and exits 1.
cat > "$TMP/rank.sh" <<EOF
r=\${COHORT_RANK:-\${OMPI_COMM_WORLD_RANK:-\$RANK}}
if [ "\$r" = "\$1" ]; then sleep 1; date +%s%N > "\$2"; exit 1; fi
exec $TMP/bin/sleep 600
EOF
cat > "$TMP/waitn.sh" <<EOF
pids=()
for ((i = 0; i < 63; i++)); do $TMP/bin/sleep 600 & pids+=(\$!); done
RANK=63 sh $TMP/rank.sh 63 "\$1" &
wait -n; rc=\$?
kill "\${pids[@]}"; wait
exit \$rc
EOF

# run NAME START COMMAND...: START is "mark" (read $TMP/mark) or "events:DIR" (cohort's data root).
run() {
  local name=$1 start=$2 rc=0 end left
  shift 2
  rm -f "$TMP/mark"
  timeout 60 "$@" > "$TMP/out.txt" 2>&1 || rc=$?
  end=$(date +%s%N)
  left=$(pgrep -fc "$TMP/" || true)
  [ "$left" = 0 ] || pgrep -f "$TMP/" | xargs -r kill -9
  [ "$start" = mark ] && start=$(cat "$TMP/mark" 2>/dev/null || echo none)
  echo "$name $start $end $left $rc" >> "$TMP/results.txt"
}

mpi=(mpirun --allow-run-as-root --oversubscribe --mca odls_base_cutoff 100000)
torchrun=(/usr/bin/python3 -m torch.distributed.run --standalone --redirects 1 --tee 1 --monitor_interval 0.1)
for ((i = 0; i < REPS; i++)); do
  echo "== teardown round $((i + 1))/$REPS" >&2
  run cohort-test-rank "events:$TMP/dr$i" "$COHORT" run --nodes 4 --nproc-per-node 16 --data-root "$TMP/dr$i" \
    --log-ranks none -q -- "$TMP/bin/cohort-test-rank" rank63:sleep=1 rank63:exit=1 sleep=600
  if [ -n "${BASELINE:-}" ]; then
    run before "events:$TMP/db$i" "$(realpath "$BASELINE")" run --nodes 4 --nproc-per-node 16 --data-root "$TMP/db$i" \
      --log-ranks none -q -- "$TMP/bin/cohort-test-rank" rank63:sleep=1 rank63:exit=1 sleep=600
  fi
  run cohort-sh mark "$COHORT" run --nodes 4 --nproc-per-node 16 --data-root "$TMP/ds$i" \
    --log-ranks none -q -- sh "$TMP/rank.sh" 63 "$TMP/mark"
  run wait-n mark bash "$TMP/waitn.sh" "$TMP/mark"
  run mpirun mark "${mpi[@]}" -np 64 sh "$TMP/rank.sh" 63 "$TMP/mark"
  if [ "$TORCHRUN" = 1 ]; then
    run torchrun mark "${torchrun[@]}" --nproc_per_node 16 --log_dir "$TMP/tlog$i" --no_python \
      sh "$TMP/rank.sh" 15 "$TMP/mark"
  fi
done

python3 - "$TMP/results.txt" <<'EOF'
import glob, json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, start, end, left, rc = line.split()
    if start.startswith("events:"):
        events = [json.loads(l) for f in glob.glob(start[7:] + "/jobs/*/events.jsonl") for l in open(f)]
        ts = [e["t"] for e in events if e.get("event") == "rank_exit" and e.get("rank") == 63]
        start = str(ts[0]) if ts else "none"
    r = rows.setdefault(name, {"ms": [], "left": 0, "rc": set(), "bad": 0})
    r["left"] += int(left); r["rc"].add(rc)
    if start == "none": r["bad"] += 1
    else: r["ms"].append((int(end) - int(start)) / 1e6)
labels = {"cohort-test-rank": ("cohort 4x16", "cohort-test-rank", "rank_exit `t` in events.jsonl"),
          "cohort-sh": ("cohort 4x16", "sh script", "time written by the rank"),
          "before": ("BASELINE 4x16", "cohort-test-rank", "rank_exit `t` in events.jsonl"),
          "wait-n": ("bash `wait -n` + kill", "sh script / sleep", "time written by the rank"),
          "mpirun": ("mpirun -np 64", "sh script", "time written by the rank"),
          "torchrun": ("torchrun 1x16", "sh script", "time written by the rank")}
base = statistics.median(rows["wait-n"]["ms"]) if rows.get("wait-n", {}).get("ms") else None
print("| launcher | ranks run | start of the interval | runs | median | max | median / wait -n | exit codes | processes left |")
print("|---|---|---|---:|---:|---:|---:|---|---:|")
for name, r in rows.items():
    launcher, prog, start = labels[name]
    med = statistics.median(r["ms"]) if r["ms"] else float("nan")
    mx = max(r["ms"]) if r["ms"] else float("nan")
    ratio = f"{med / base:.2f}x" if base else "-"
    runs = f"{len(r['ms'])}" + (f" (+{r['bad']} without a start time)" if r["bad"] else "")
    print(f"| {launcher} | {prog} | {start} | {runs} | {med:.1f} ms | {mx:.1f} ms | {ratio} | "
          f"{','.join(sorted(r['rc']))} | {r['left']} |")
print("\nInterval: failing rank's exit -> launcher's exit (all other ranks stopped).")
EOF
