#!/usr/bin/env bash
# Launch cost: N trivial ranks (/bin/true) started and waited for, N = 8, 64, 256.
# Compares, in one hyperfine run per N:
#   floor      a bash loop starting N /bin/true in the background (RANK, WORLD_SIZE, ... set), then wait
#   cohort 1xN cohort run --nodes 1 --nproc-per-node N --log-ranks none -q
#   cohort 4xN cohort run --nodes 4 --nproc-per-node N/4 (4 simulated nodes)
#   mpirun     mpirun --oversubscribe -np N /bin/true
#   torchrun   python3 -m torch.distributed.run --standalone --no_python /bin/true
# Prints median wall times (ms) and the ratios cohort/floor and cohort/mpirun.
#   before     with BASELINE=path/to/an/earlier/cohort: that build, 1xN and 4xN/4, in the same run
# Run: bench/launch.sh   (env: NS="8 64 256" RUNS=10 WARMUP=2 TORCHRUN=1 COHORT=build/cohort
#                         BASELINE=)
# Needs hyperfine, openmpi-bin, python3-torch for /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
NS=${NS:-"8 64 256"}; RUNS=${RUNS:-10}; WARMUP=${WARMUP:-2}; TORCHRUN=${TORCHRUN:-1}
TMP=$(mktemp -d /tmp/cohort-bench-launch.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

cat > "$TMP/floor.sh" <<'EOF'
n=$1
for ((i = 0; i < n; i++)); do
  RANK=$i WORLD_SIZE=$n LOCAL_RANK=$i LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 /bin/true &
done
wait
EOF

for n in $NS; do
  args=(-n floor "bash $TMP/floor.sh $n"
        -n cohort1 "$COHORT run --nodes 1 --nproc-per-node $n --log-ranks none -q --data-root $TMP/dr -- /bin/true"
        -n cohort4 "$COHORT run --nodes 4 --nproc-per-node $((n / 4)) --log-ranks none -q --data-root $TMP/dr -- /bin/true"
        -n mpirun "mpirun --allow-run-as-root --oversubscribe --mca odls_base_cutoff 100000 -np $n /bin/true")
  if [ -n "${BASELINE:-}" ]; then
    args+=(-n before1 "$(realpath "$BASELINE") run --nodes 1 --nproc-per-node $n --log-ranks none -q --data-root $TMP/dr -- /bin/true"
           -n before4 "$(realpath "$BASELINE") run --nodes 4 --nproc-per-node $((n / 4)) --log-ranks none -q --data-root $TMP/dr -- /bin/true")
  fi
  if [ "$TORCHRUN" = 1 ]; then args+=(-n torchrun "/usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node $n --redirects 1 --tee 1 --monitor_interval 0.1 --log_dir $TMP/tlog --no_python /bin/true"); fi
  echo "== launch N=$n" >&2
  # Every run starts with an empty data root (cohort) and log dir (torchrun); not timed.
  hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --prepare "rm -rf $TMP/dr $TMP/tlog" \
    --export-json "$TMP/n$n.json" "${args[@]}" >&2
done

python3 - "$TMP" $NS <<'EOF'
import json, sys
tmp, ns = sys.argv[1], sys.argv[2:]
print("| N | floor (bash loop) | cohort 1xN | cohort 4xN/4 | mpirun | torchrun | cohort 1xN / floor | cohort 4xN/4 / floor | cohort 1xN / mpirun | cohort 4xN/4 / mpirun |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in ns:
    med = {r["command"]: r["median"] for r in json.load(open(f"{tmp}/n{n}.json"))["results"]}
    ms = lambda k: f"{med[k] * 1e3:.1f} ms" if k in med else "not run"
    ratio = lambda a, b: f"{med[a] / med[b]:.2f}x"
    print(f"| {n} | {ms('floor')} | {ms('cohort1')} | {ms('cohort4')} | {ms('mpirun')} | {ms('torchrun')} | "
          f"{ratio('cohort1', 'floor')} | {ratio('cohort4', 'floor')} | {ratio('cohort1', 'mpirun')} | {ratio('cohort4', 'mpirun')} |")
if any("before1" in {r["command"] for r in json.load(open(f"{tmp}/n{n}.json"))["results"]} for n in ns):
    print("\n| N | before 1xN | before 4xN/4 | before 1xN / floor | before 4xN/4 / floor | now / before, 1xN | now / before, 4xN/4 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in ns:
        med = {r["command"]: r["median"] for r in json.load(open(f"{tmp}/n{n}.json"))["results"]}
        print(f"| {n} | {med['before1'] * 1e3:.1f} ms | {med['before4'] * 1e3:.1f} ms | "
              f"{med['before1'] / med['floor']:.2f}x | {med['before4'] / med['floor']:.2f}x | "
              f"{med['cohort1'] / med['before1']:.2f}x | {med['cohort4'] / med['before4']:.2f}x |")
print("\nMedian wall time from start to exit of each launcher; every rank runs /bin/true.")
EOF
