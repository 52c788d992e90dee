#!/usr/bin/env bash
# The preloading launcher against a fresh interpreter per rank, on a trivial PyTorch gloo job
# (import torch, init_process_group, one all-reduce, a barrier), N = 4 and 16 ranks on one node.
# In one hyperfine run per N:
#   bash loop  N `python3 gloo.py` in the background with the rank variables set, then wait
#   direct     cohort run --launcher direct
#   preload    cohort run --launcher preload (one template imports torch, then forks the ranks)
#   torchrun   python3 -m torch.distributed.run --standalone --monitor_interval 0.1
# Then the DDP example (examples/pytorch/ddp.yaml), direct against preload. Then the memory of
# N idle ranks after `import torch` (the sum of their PSS, from /proc/PID/smaps_rollup), direct
# against preload.
# Run: bench/preload.sh   (env: NS="4 16" RUNS=5 WARMUP=1 COHORT=build/cohort)
# Needs hyperfine and Debian's python3-torch for /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
NS=${NS:-"4 16"}; RUNS=${RUNS:-5}; WARMUP=${WARMUP:-1}
TMP=$(mktemp -d /tmp/cohort-bench-preload.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

cat > "$TMP/gloo.py" <<'EOF'
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
EOF
cat > "$TMP/loop.sh" <<'EOF'
n=$1; port=$((20000 + RANDOM % 20000))
for ((i = 0; i < n; i++)); do
  RANK=$i WORLD_SIZE=$n LOCAL_RANK=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    /usr/bin/python3 "$2" &
done
wait
EOF
cat > "$TMP/idle.py" <<'EOF'
import os, time, torch
open(os.path.join(os.environ["PIDS"], os.environ["RANK"]), "w").write(str(os.getpid()))
time.sleep(600)
EOF

for n in $NS; do
  run="$COHORT run -q --log-ranks none --data-root $TMP/dr --nproc-per-node $n"
  echo "== gloo job, N=$n" >&2
  hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --prepare "rm -rf $TMP/dr $TMP/tlog" \
    --export-json "$TMP/n$n.json" \
    -n loop "bash $TMP/loop.sh $n $TMP/gloo.py" \
    -n direct "$run --launcher direct -- /usr/bin/python3 $TMP/gloo.py" \
    -n preload "$run --launcher preload -- /usr/bin/python3 $TMP/gloo.py" \
    -n torchrun "/usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node $n --redirects 1 --tee 1 --monitor_interval 0.1 --log_dir $TMP/tlog $TMP/gloo.py" >&2
done

# The DDP example end to end (examples/pytorch/ddp.yaml: 2 nodes x 2 ranks, 8 epochs).
echo "== DDP example" >&2
ddp="$COHORT run -q --log-ranks none --data-root $TMP/dr -f examples/pytorch/ddp.yaml"
hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --prepare "rm -rf $TMP/dr" \
  --export-json "$TMP/ddp.json" \
  -n direct "$ddp --launcher direct" -n preload "$ddp --launcher preload" >&2

# PSS of N idle ranks: each writes its pid, cohort is stopped once every rank has.
pss() {  # launcher n -> MiB
  rm -rf "$TMP/pids" && mkdir -p "$TMP/pids"
  PIDS=$TMP/pids $COHORT run -q --log-ranks none --data-root "$TMP/dr" --nproc-per-node "$2" \
    --launcher "$1" -- /usr/bin/python3 "$TMP/idle.py" >/dev/null 2>&1 &
  local cohort=$! deadline=$((SECONDS + 120))
  until [ "$(ls "$TMP/pids" | wc -l)" -ge "$2" ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
  sleep 1
  local kb=0 pid
  for f in "$TMP"/pids/*; do
    pid=$(cat "$f")
    kb=$((kb + $(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup")))
  done
  kill -INT "$cohort"; wait "$cohort" 2>/dev/null || true
  echo $((kb / 1024))
}
for n in $NS; do
  echo "pss $n $(pss direct "$n") $(pss preload "$n")" >>"$TMP/pss"
done

python3 - "$TMP" $NS <<'EOF'
import json, sys
tmp, ns = sys.argv[1], sys.argv[2:]
print("| N | bash loop | cohort direct | cohort preload | torchrun | preload / torchrun | preload / direct |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for n in ns:
    med = {r["command"]: r["median"] for r in json.load(open(f"{tmp}/n{n}.json"))["results"]}
    s = lambda k: f"{med[k]:.2f} s"
    print(f"| {n} | {s('loop')} | {s('direct')} | {s('preload')} | {s('torchrun')} | "
          f"{med['preload'] / med['torchrun']:.2f}x | {med['preload'] / med['direct']:.2f}x |")
print("\nMedian wall time of the trivial gloo job from start to exit.\n")
med = {r["command"]: r["median"] for r in json.load(open(f"{tmp}/ddp.json"))["results"]}
print("| DDP example (2x2 ranks, 8 epochs) | direct | preload | preload / direct |")
print("|---|---:|---:|---:|")
print(f"| examples/pytorch/ddp.yaml | {med['direct']:.2f} s | {med['preload']:.2f} s | "
      f"{med['preload'] / med['direct']:.2f}x |\n")
print("| N | PSS of N idle ranks, direct | preload | preload / direct |")
print("|---:|---:|---:|---:|")
for line in open(f"{tmp}/pss"):
    _, n, direct, preload = line.split()
    print(f"| {n} | {direct} MiB | {preload} MiB | {int(preload) / int(direct):.2f}x |")
EOF
