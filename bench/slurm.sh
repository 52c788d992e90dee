#!/usr/bin/env bash
# cohort on a real Slurm cluster (tests/slurm/cluster: slurmctld and three slurmd nodes, each in a
# network namespace of its own) next to a bare sbatch + srun of the same ranks, in one run,
# REPS rounds each, interleaved:
#   start     submit -> every rank running, 2 nodes x 2 ranks: from just before `cohort run
#             --backend slurm` (or `sbatch --wrap "srun ..."`) to the last rank's first instruction
#   teardown  3 nodes x 2 ranks, rank 5 (last node) fails after 1 s: from its exit to the last
#             other rank's SIGTERM (cohort's fail-fast, against srun --kill-on-bad-exit=1; without
#             that flag srun never stops the others)
#   lost      2 nodes, policy.heartbeat_timeout 2s: node 1's network is cut (its veth down); from
#             the cut to the coordinator's decision (the "stopping" event)
# Needs root. Run: bench/slurm.sh   (env: REPS=7 COHORT=build/cohort; COHORT_SLURM_STATE=DIR to use
# a cluster already up)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
REPS=${REPS:-7}
TMP=$(mktemp -d /tmp/cohort-bench-slurm.XXXXXX)
chmod 755 "$TMP"
CLUSTER=tests/slurm/cluster
own_cluster=0
if [ -z "${COHORT_SLURM_STATE:-}" ]; then
  COHORT_SLURM_STATE=$TMP/cluster
  own_cluster=1
  echo "== starting a Slurm cluster in $COHORT_SLURM_STATE" >&2
  "$CLUSTER" up "$COHORT_SLURM_STATE"
fi
# shellcheck disable=SC1091
. "$COHORT_SLURM_STATE/env"
cleanup() {
  scancel --quiet --user=root 2>/dev/null || true
  [ "$own_cluster" = 1 ] && "$CLUSTER" down "$COHORT_SLURM_STATE" >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT

# The rank: writes when it started; in "fail" mode rank $2 fails after 1 s and the others write
# when SIGTERM reaches them.
cat > "$TMP/rank.sh" <<EOF
r=\${COHORT_RANK:-\$SLURM_PROCID}
date +%s%N > "$TMP/t/start.\$r"
[ "\$1" = start ] && exit 0
if [ "\$r" = "\$2" ]; then sleep 1; date +%s%N > "$TMP/t/fail"; exit 1; fi
trap 'date +%s%N > "$TMP/t/term.\$r"; kill \$!; exit 143' TERM
sleep 600 & wait
EOF

max_of() { cat "$@" 2>/dev/null | sort -n | tail -1; }
wait_files() {  # wait_files N PATTERN: until N files match, up to 60 s
  for _ in $(seq 6000); do
    [ "$(ls $2 2>/dev/null | wc -l)" -ge "$1" ] && return 0
    sleep 0.01
  done
  return 1
}
settle() { for _ in $(seq 200); do [ -z "$(squeue -h -t pd,r,cg -o %i)" ] && return; sleep 0.05; done; }
ms() { echo $(( ($1 - $2) / 1000000 )); }
gen=(--framework generic -q --log-ranks none)

for ((i = 0; i < REPS; i++)); do
  echo "== round $((i + 1))/$REPS" >&2
  # -- start
  rm -rf "$TMP/t"; mkdir "$TMP/t"; settle
  t0=$(date +%s%N)
  "$COHORT" run --backend slurm --data-root "$TMP/d$i" --nodes 2 --nproc-per-node 2 "${gen[@]}" \
    -- sh "$TMP/rank.sh" start
  echo "start cohort $(ms "$(max_of "$TMP"/t/start.*)" "$t0")" >> "$TMP/results.txt"
  rm -rf "$TMP/t"; mkdir "$TMP/t"; settle
  t0=$(date +%s%N)
  sbatch --parsable -N2 --ntasks-per-node=2 --output=/dev/null \
    --wrap "srun sh $TMP/rank.sh start" > /dev/null
  wait_files 4 "$TMP/t/start.*"
  echo "start sbatch+srun $(ms "$(max_of "$TMP"/t/start.*)" "$t0")" >> "$TMP/results.txt"

  # -- teardown
  rm -rf "$TMP/t"; mkdir "$TMP/t"; settle
  "$COHORT" run --backend slurm --data-root "$TMP/f$i" --nodes 3 --nproc-per-node 2 "${gen[@]}" \
    -- sh "$TMP/rank.sh" fail 5 || true
  echo "teardown cohort $(ms "$(max_of "$TMP"/t/term.*)" "$(cat "$TMP/t/fail")")" >> "$TMP/results.txt"
  rm -rf "$TMP/t"; mkdir "$TMP/t"; settle
  job=$(sbatch --parsable -N3 --ntasks-per-node=2 --output=/dev/null \
    --wrap "srun --kill-on-bad-exit=1 sh $TMP/rank.sh fail 5")
  wait_files 1 "$TMP/t/fail"
  while [ -n "$(squeue -h -j "$job" -t pd,r,cg -o %i 2>/dev/null)" ]; do sleep 0.05; done
  echo "teardown srun--kill-on-bad-exit $(ms "$(max_of "$TMP"/t/term.*)" "$(cat "$TMP/t/fail")")" \
    >> "$TMP/results.txt"

  # -- lost node
  rm -rf "$TMP/t"; mkdir "$TMP/t"; settle
  "$COHORT" run --backend slurm --data-root "$TMP/l$i" --nodes 2 --heartbeat-timeout 2s \
    "${gen[@]}" -- sh "$TMP/rank.sh" fail none > /dev/null 2>&1 &
  runner=$!
  wait_files 2 "$TMP/t/start.*"
  sleep 0.5
  t0=$(date +%s%N)
  "$CLUSTER" link n2 down
  wait "$runner" || true
  "$CLUSTER" link n2 up
  decided=$(grep '"state":"stopping"' "$TMP"/l$i/jobs/*/events.jsonl | head -1 |
            sed 's/.*"t":\([0-9]*\).*/\1/')
  echo "lost cohort-2s $(ms "$decided" "$t0")" >> "$TMP/results.txt"
done

python3 - "$TMP/results.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, who, value = line.split()
    rows.setdefault(what, {}).setdefault(who, []).append(int(value))
for what, peers in rows.items():
    print(f"{what}:")
    base = statistics.median(next(iter(peers.values())))
    for who, values in peers.items():
        med = statistics.median(values)
        ratio = f"  ({med / base:.2f}x cohort)" if who != next(iter(peers)) else ""
        print(f"  {who:32s} median {med:7.0f} ms  min {min(values):6d}  max {max(values):6d}  "
              f"n={len(values)}{ratio}")
EOF
