#!/usr/bin/env bash
# Log throughput: 64 ranks each write BYTES of numbered lines to stdout as fast as they can
# (cohort-test-rank flood=BYTES); aggregate MB/s = 64 * BYTES / wall time (MB = 10^6 bytes).
#   floor   a bash loop starts the 64 writers in the background, all with stdout on one pipe,
#           and `cat` copies the pipe into one file: { for ...; do rank & done; wait; } | cat > file
#   cohort  cohort run --nodes 4 --nproc-per-node 16 -q > console.txt: cohort writes every rank's
#           logs/worker-<rank>.log and the merged, prefixed console stream to a file
# Both run REPS times, alternating, with `sync` (not timed) before each run. Then it checks the
# bytes (per-rank logs, merged file >= 64 * BYTES) and accounts for every line: lines on the
# console, lines cohort says it did not show, lines missing without notice, lines not whole.
# Run: bench/logs.sh   (env: BYTES=33554432 REPS=3 COHORT=build/cohort)
set -euo pipefail
export LC_ALL=C   # byte-wise grep: 20x faster on these files
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
RANK_BIN=$(dirname "$COHORT")/cohort-test-rank
BYTES=${BYTES:-33554432}; REPS=${REPS:-3}; RANKS=64
TMP=$(mktemp -d /tmp/cohort-bench-logs.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# A line as flood writes it, behind cohort's console prefix or not, or cohort's notice of lines not shown.
WHOLE='^((\[worker/[0-9]+ node[0-9]+\] )?rank [0-9]+ line [0-9]+ [a-zA-Z0-9]{62}|\[cohort\] [0-9]+ lines were not shown .*)$'
cat > "$TMP/floor.sh" <<EOF
{ for ((i = 0; i < $RANKS; i++)); do COHORT_RANK=\$i "$RANK_BIN" flood=$BYTES & done; wait; } | cat > "$TMP/floor.txt"
EOF
floor=(bash "$TMP/floor.sh")
cohort=("$COHORT" run --nodes 4 --nproc-per-node $((RANKS / 4)) -q --data-root "$TMP/dr" -- "$RANK_BIN" flood="$BYTES")

for ((round = 1; round <= REPS; round++)); do
  for who in floor cohort; do
    echo "== logs round $round/$REPS: $who, $RANKS x $BYTES bytes" >&2
    rm -rf "$TMP/dr" "$TMP/floor.txt" "$TMP/console.txt"; sync
    rc=0; t0=$(date +%s%N)
    if [ "$who" = floor ]; then timeout 600 "${floor[@]}" || rc=$?; out=$TMP/floor.txt
    else timeout 600 "${cohort[@]}" > "$TMP/console.txt" || rc=$?; out=$TMP/console.txt; fi
    t1=$(date +%s%N)
    # who t0 t1 rc merged-bytes merged-lines per-rank-log-bytes per-rank-log-lines shown notices not-whole
    logs=(- -); [ "$who" = cohort ] && logs=($(cat "$TMP"/dr/jobs/*/logs/*.log | wc -lc))
    echo "$who $t0 $t1 $rc $(wc -c < "$out") $(wc -l < "$out") ${logs[1]} ${logs[0]}" \
      "$(grep -c '^\[worker' "$out" || true)" \
      "$(grep '^\[cohort\] [0-9]* lines were not shown' "$out" | awk '{n += $2} END {print n + 0}')" \
      "$(grep -cvE "$WHOLE" "$out" || true)" >> "$TMP/results.txt"
  done
done

python3 - "$TMP/results.txt" "$RANKS" "$BYTES" <<'EOF'
import statistics, sys
ranks, per = map(int, sys.argv[2:]); total = ranks * per
runs = [l.split() for l in open(sys.argv[1])]
secs = lambda r: (int(r[2]) - int(r[1])) / 1e9
med = {w: statistics.median(secs(r) for r in runs if r[0] == w) for w in ("floor", "cohort")}
cmp = lambda n, want: f"{int(n):,}" + (" (ok)" if int(n) >= want else " (SHORT)")
print("| | runs | median wall | aggregate MB/s | vs floor | exit codes | bytes in the per-rank logs (min) |")
print("|---|---:|---:|---:|---:|---|---:|")
for who, label in (("floor", "floor: bash loop, one pipe, `cat > file`"), ("cohort", "cohort 4x16, console to a file")):
    rs = [r for r in runs if r[0] == who]
    logs = cmp(min(int(r[6]) for r in rs), total) if who == "cohort" else "- (none)"
    print(f"| {label} | {len(rs)} | {med[who]:.2f} s | {total / med[who] / 1e6:.0f} | {med['floor'] / med[who]:.2f}x | "
          f"{','.join(sorted({r[3] for r in rs}))} | {logs} |")
print(f"\n{ranks} ranks x {per:,} bytes = {total:,} bytes per run; MB/s = that / median wall / 10^6.\n")
lines = max(int(r[7]) for r in runs if r[0] == "cohort")  # every line the ranks wrote, from cohort's logs
print(f"Every line ({lines:,} per run), per run: where it went in the merged stream (floor.txt / cohort's console).\n")
print("| run | | wall | merged bytes | ranks' lines in it | not shown, with cohort's notice | missing, no notice | lines not whole |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for i, r in enumerate(runs):
    who, shown, notices = r[0], int(r[8]) if r[0] == "cohort" else int(r[5]), int(r[9])
    print(f"| {i // 2 + 1} | {who} | {secs(r):.2f} s | {int(r[4]):,} | {shown:,} | {notices:,} | {lines - shown - notices:,} | {int(r[10]):,} |")
EOF
