#!/usr/bin/env bash
# cohort on real NVIDIA GPUs: pass or fail for each thing that the tests elsewhere can only check
# with stand-ins. Made to run on a bare GPU machine that has an NVIDIA driver (nvidia-smi) and a
# Python with a CUDA build of torch, and nothing else: this repository and a Release build of
# cohort (one file; copy build-release/cohort there) are all it needs. No network, no root
# (the one check that needs root and bubblewrap says so and is skipped without them).
#
#   bench/gpu-check.sh                       uses $COHORT, else build-release/cohort, else
#                                            build/cohort, else cohort on PATH
#   env: COHORT=PATH PYTHON=python3 (the ranks' interpreter) KEEP=1 (keep the job directories)
#
# Checks, each printed as `PASS name: what was seen`, `FAIL name: why` or `SKIP name: why`:
#   ddp_nccl         DDP with the NCCL backend, one rank per GPU, trains (the loss falls) and an
#                    all-reduce across every GPU sums right
#   device_mapping   rank with LOCAL_RANK r gets CUDA_VISIBLE_DEVICES=r and sees exactly one GPU,
#                    the one nvidia-smi lists as index r (by UUID)
#   top_gpu          GPU utilisation and memory of a busy rank in resources.jsonl and in
#                    `cohort top` (what the console plots)
#   cuda_oom         a real CUDA out-of-memory in one rank: the root cause's hint names it
#   nccl_hang        (2+ GPUs) a rank held up in an NCCL all-reduce: hang_timeout ends the job
#                    with exit code 124 and its stack names the line it waits on
#   preload_refuses  launcher preload refuses to fork when a preloaded module initialised CUDA
#   preload_works    and forks ranks that use the GPU when none did
#   own_gpus         a rank sees only its own GPU: CUDA_VISIBLE_DEVICES, and with --isolate (root,
#                    bubblewrap) only its own /dev/nvidiaN
# Without a GPU it says so and exits 0, having checked nothing. Exit 1 when a check failed (or
# GPUs are there but the Python cannot use them).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

say() { printf '%s\n' "$*"; }

# ---------------------------------------------------------------------------------- the GPUs
if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "gpu-check: no GPU is present (no nvidia-smi on PATH, so no NVIDIA driver): nothing was checked"
  exit 0
fi
if ! gpu_list=$(nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader 2>&1); then
  say "gpu-check: no GPU is present (nvidia-smi: $(head -n 1 <<<"$gpu_list")): nothing was checked"
  exit 0
fi
gpu_list=$(grep -E '^[0-9]+, ' <<<"$gpu_list" || true)
gpus=$(grep -c . <<<"$gpu_list" || true)
if [ "${gpus:-0}" -eq 0 ]; then
  say "gpu-check: no GPU is present (nvidia-smi lists none): nothing was checked"
  exit 0
fi
gpu_name=$(head -n 1 <<<"$gpu_list" | cut -d, -f2 | sed 's/^ *//')

cuda=$("$PYTHON" -c 'import torch
print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count(),
      torch.distributed.is_nccl_available())' 2>&1 | tail -n 1)
read -r torch_version torch_cuda cuda_ok cuda_count nccl_ok <<<"$cuda"
if [ "$cuda_ok" != True ] || [ "${cuda_count:-0}" -lt 1 ] 2>/dev/null; then
  say "gpu-check: $gpus GPU(s) present ($gpu_name) but $PYTHON's torch cannot use them ($cuda): nothing was checked"
  exit 1
fi

COHORT=${COHORT:-}
for c in "$COHORT" build-release/cohort build/cohort "$(command -v cohort 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then COHORT=$(realpath "$c"); break; fi
done
[ -x "$COHORT" ] || { say "gpu-check: no cohort binary (set COHORT=PATH)"; exit 1; }

TMP=$(mktemp -d /tmp/cohort-gpu-check.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
DATA=$TMP/data WORK=$TMP/work
mkdir -p "$DATA" "$WORK"
export PYTHONUNBUFFERED=1

say "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $gpus x $gpu_name, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1), torch $torch_version (CUDA $torch_cuda, NCCL $nccl_ok), cohort $("$COHORT" version | cut -d' ' -f2) ($(du -h "$COHORT" | cut -f1))"

passed=0 failed=0 skipped=0
pass() { say "PASS $1: $2"; passed=$((passed + 1)); }
failc() { say "FAIL $1: $2"; failed=$((failed + 1)); }
skip() { say "SKIP $1: $2"; skipped=$((skipped + 1)); }

# cohort run with the check's data root; its stdout in $TMP/NAME.out, stderr in $TMP/NAME.err.
# Returns cohort's exit code.
run() {
  local name=$1 limit=$2
  shift 2
  timeout -k 10 "$limit" "$COHORT" run --data-root "$DATA" --workdir "$WORK" -q "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.err"
}
last_lines() { tail -n "${2:-5}" "$1" | sed 's/^/    /'; }
job_dir_of() { ls -td "$DATA"/jobs/"$1"-* 2>/dev/null | head -n 1; }

# ------------------------------------------------------------------------------- the ranks
cat > "$WORK/ddp.py" <<'EOF'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(0)  # the rank's one visible GPU
dev = torch.device("cuda", 0)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1).to(dev), device_ids=[0])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(1024, 64, device=dev)
y = x.sum(1, keepdim=True)
losses = []
for step in range(100):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
t = torch.tensor([float(rank)], device=dev)
dist.all_reduce(t)
print(f"ddp rank={rank} world={world} backend={dist.get_backend()} first={losses[0]:.4f} "
      f"last={losses[-1]:.4f} sum={t.item():.0f}")
dist.destroy_process_group()
EOF
cat > "$WORK/mapping.py" <<'EOF'
import os, torch
p = torch.cuda.get_device_properties(0)
uuid = str(getattr(p, "uuid", ""))
print("map local_rank=%s visible=%s count=%d uuid=%s" % (os.environ.get("LOCAL_RANK"),
      os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count(), uuid))
EOF
cat > "$WORK/busy.py" <<'EOF'
import time, torch
a = torch.randn(4096, 4096, device="cuda")
hold = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")  # 512 MiB
end = time.time() + 25
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
print("busy done")
EOF
cat > "$WORK/oom.py" <<'EOF'
import torch
total = torch.cuda.get_device_properties(0).total_memory
print("asking for", 2 * total, "bytes", flush=True)
x = torch.empty(2 * total, dtype=torch.uint8, device="cuda")
EOF
cat > "$WORK/hang.py" <<'EOF'
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("warmed up", flush=True)
if dist.get_rank() == 1:
    time.sleep(3600)  # never joins the next all-reduce
dist.all_reduce(t)
torch.cuda.synchronize()  # rank 0 waits here
EOF
cat > "$WORK/cuda_at_import.py" <<'EOF'
import torch
torch.cuda.init()
EOF
cat > "$WORK/forked.py" <<'EOF'
import torch
x = torch.ones(1024, device="cuda")
print("forked rank uses", torch.cuda.get_device_name(0), "sum", int(x.sum().item()))
EOF
cat > "$WORK/own.py" <<'EOF'
import glob, os, torch
devs = sorted(d for d in glob.glob("/dev/nvidia[0-9]*"))
print("own visible=%s count=%d devs=%s" % (os.environ.get("CUDA_VISIBLE_DEVICES"),
      torch.cuda.device_count(), ",".join(devs)))
EOF

# ------------------------------------------------------------------------------- the checks
check_ddp() {
  if ! run ddp 300 --nproc-per-node "$gpus" -- "$PYTHON" ddp.py; then
    failc ddp_nccl "cohort run exited $?:"; last_lines "$TMP/ddp.err"; return
  fi
  local lines expected bad
  lines=$(grep -c 'backend=nccl' "$TMP/ddp.out")
  expected=$((gpus * (gpus - 1) / 2))
  bad=$(grep '^.*ddp rank=' "$TMP/ddp.out" | awk -v e="$expected" '{
      for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      if (v["backend"] != "nccl" || v["last"] + 0 >= v["first"] + 0 || v["sum"] + 0 != e) print }')
  if [ "$lines" -eq "$gpus" ] && [ -z "$bad" ]; then
    pass ddp_nccl "$gpus rank(s) trained with NCCL, loss $(grep -m1 -o 'first=[^ ]* last=[^ ]*' "$TMP/ddp.out"), all-reduce sum $expected"
  else
    failc ddp_nccl "$lines of $gpus ranks reported NCCL; wrong: ${bad:-none}"; last_lines "$TMP/ddp.out"
  fi
}

check_mapping() {
  if ! run mapping 120 --nproc-per-node "$gpus" --framework pytorch -- "$PYTHON" mapping.py; then
    failc device_mapping "cohort run exited $?:"; last_lines "$TMP/mapping.err"; return
  fi
  local wrong="" r line uuid
  for ((r = 0; r < gpus; r++)); do
    line=$(grep -o "map local_rank=$r .*" "$TMP/mapping.out" | head -n 1)
    uuid=$(awk -F', ' -v i="$r" '$1 == i {print $3}' <<<"$gpu_list")
    if [ -z "$line" ]; then wrong+=" local rank $r said nothing;"; continue; fi
    [[ $line == *"visible=$r count=1 "* ]] || wrong+=" local rank $r: $line;"
    # torch prints the UUID without nvidia-smi's "GPU-" prefix.
    if [[ $line != *"uuid=" ]] && [[ "GPU-${line##*uuid=}" != "$uuid" ]] && [[ "${line##*uuid=}" != "$uuid" ]]; then
      wrong+=" local rank $r is on ${line##*uuid=}, not index $r ($uuid);"
    fi
  done
  if [ -z "$wrong" ]; then
    pass device_mapping "LOCAL_RANK r -> CUDA_VISIBLE_DEVICES=r, one GPU each, UUIDs match nvidia-smi"
  else
    failc device_mapping "$wrong"
  fi
}

check_top() {
  run busy 120 --name gpu-busy -- "$PYTHON" busy.py &
  local pid=$! job="" seen="" table=""
  for _ in $(seq 1 100); do
    job=$(job_dir_of gpu-busy)
    if [ -n "$job" ] && grep -q '"gpu_memory_bytes"' "$job/resources.jsonl" 2>/dev/null; then
      seen=$(grep '"gpu_memory_bytes"' "$job/resources.jsonl" | tail -n 1)
      table=$("$COHORT" top "$(basename "$job")" --once --data-root "$DATA" 2>&1)
      grep -q '"gpu_util": *[1-9]' "$job/resources.jsonl" && break
    fi
    sleep 0.5
  done
  wait "$pid"
  local code=$?
  if [ -z "$seen" ]; then
    failc top_gpu "no GPU sample in resources.jsonl (job exit $code)"; last_lines "$TMP/busy.err"
  elif ! grep -q '"gpu_util": *[1-9]' "$job/resources.jsonl"; then
    failc top_gpu "GPU memory sampled but utilisation stayed 0: $seen"
  elif ! grep -qi 'gpu' <<<"$table"; then
    failc top_gpu "cohort top shows no GPU column:"; say "$table"
  else
    pass top_gpu "sample $seen; cohort top: $(grep -i -m1 'gpu' <<<"$table")"
  fi
}

check_oom() {
  run oom 120 --name gpu-oom -- "$PYTHON" oom.py
  local code=$?
  if [ "$code" -ne 0 ] && grep -q 'the GPU ran out of memory' "$TMP/oom.err"; then
    pass cuda_oom "exit $code, hint: $(grep -m1 -o 'the GPU ran out of memory[^)]*' "$TMP/oom.err")"
  else
    failc cuda_oom "exit $code without the CUDA out-of-memory hint:"; last_lines "$TMP/oom.err" 12
  fi
}

check_hang() {
  if [ "$gpus" -lt 2 ]; then skip nccl_hang "needs 2 GPUs or more, this machine has $gpus"; return; fi
  run hang 300 --name gpu-hang --nproc-per-node 2 --hang-timeout 30s -- "$PYTHON" hang.py
  local code=$? job stacks
  job=$(job_dir_of gpu-hang)
  stacks=$(cat "$TMP/hang.err" "$job/stacks.txt" 2>/dev/null)
  if [ "$code" -eq 124 ] && grep -q 'hang.py' <<<"$stacks" && grep -Eq 'synchronize|all_reduce' <<<"$stacks"; then
    pass nccl_hang "exit 124; stack: $(grep -m1 -E 'hang.py.*(synchronize|all_reduce)|(synchronize|all_reduce).*hang.py' <<<"$stacks" | sed 's/^ *//')"
  else
    failc nccl_hang "exit $code (want 124 and a stack at the waiting line):"; last_lines "$TMP/hang.err" 20
  fi
}

check_preload() {
  run preload-bad 180 --name gpu-preload-bad --env "PYTHONPATH=$WORK" --launcher preload \
    --preload torch,cuda_at_import -- "$PYTHON" forked.py
  local code=$?
  if [ "$code" -ne 0 ] && grep -q 'initialised CUDA' "$TMP/preload-bad.err"; then
    pass preload_refuses "exit $code: $(grep -m1 -o 'importing .*initialised CUDA[^;]*' "$TMP/preload-bad.err")"
  else
    failc preload_refuses "exit $code without the refusal:"; last_lines "$TMP/preload-bad.err" 8
  fi
  if run preload-good 180 --name gpu-preload-good --launcher preload --preload torch \
       --nproc-per-node "$gpus" -- "$PYTHON" forked.py &&
     [ "$(grep -c 'forked rank uses' "$TMP/preload-good.out")" -eq "$gpus" ]; then
    pass preload_works "$gpus forked rank(s) used the GPU"
  else
    failc preload_works "the forked ranks did not all use the GPU:"; last_lines "$TMP/preload-good.err" 8
  fi
}

check_own() {
  local isolate=() how="CUDA_VISIBLE_DEVICES only (device files not checked: --isolate needs root and bubblewrap)"
  if [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/bwrap ]; then isolate=(--isolate); how="with --isolate"; fi
  if ! run own 120 "${isolate[@]}" -- "$PYTHON" own.py; then
    failc own_gpus "cohort run exited $?:"; last_lines "$TMP/own.err"; return
  fi
  local line
  line=$(grep -o 'own visible=.*' "$TMP/own.out" | head -n 1)
  if [[ $line != *"count=1 "* ]]; then
    failc own_gpus "the rank sees more than its GPU: $line"
  elif [ ${#isolate[@]} -gt 0 ] && [ "$gpus" -gt 1 ] && [[ "${line##*devs=}" == *,* ]]; then
    failc own_gpus "isolated, the rank still has other GPUs' device files: $line"
  else
    pass own_gpus "$line ($how)"
  fi
}

check_ddp
check_mapping
check_top
check_oom
check_hang
check_preload
check_own
say "gpu-check: $passed passed, $failed failed, $skipped skipped ($gpus x $gpu_name)"
[ "$failed" -eq 0 ]
