#!/usr/bin/env bash
# bench/gpu-check.sh where there is no GPU (this machine): it must say so and exit 0 having
# checked nothing; where nvidia-smi answers but the Python cannot use a GPU it must fail, never
# pass a check. Stand-in nvidia-smi programs play the driver's two answers; what they stand in
# for is only the GPU's presence: every check itself needs a real GPU (docs/benchmarks.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/cohort-gpu-check-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # NAME WANT_CODE WANT_TEXT -- command...
  local name=$1 want=$2 text=$3 code=0
  shift 4
  out=$("$@" 2>&1) || code=$?
  if [ "$code" -ne "$want" ] || ! grep -qF -- "$text" <<<"$out" || grep -qE '^(PASS|FAIL) ' <<<"$out"; then
    echo "FAILED $name: exit $code (want $want), output:"; echo "$out" | sed 's/^/  /'
    fails=$((fails + 1))
  else
    echo "ok $name: $(head -n 1 <<<"$out")"
  fi
}
# A PATH with no nvidia-smi: the system's directories, less any that has one.
path=""
for d in /usr/local/bin /usr/bin /bin; do
  [ -x "$d/nvidia-smi" ] || path=${path:+$path:}$d
done
expect no_driver 0 "no GPU is present (no nvidia-smi on PATH" -- env PATH="$path" "$here/bench/gpu-check.sh"

mkdir -p "$tmp/broken" "$tmp/one"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn'"'"'t communicate with the NVIDIA driver."\nexit 9\n' > "$tmp/broken/nvidia-smi"
printf '#!/bin/sh\necho "0, NVIDIA H100 80GB HBM3, GPU-00000000-0000-0000-0000-000000000000, 81559 MiB"\n' > "$tmp/one/nvidia-smi"
chmod +x "$tmp/broken/nvidia-smi" "$tmp/one/nvidia-smi"
expect driver_not_talking 0 "no GPU is present (nvidia-smi: NVIDIA-SMI has failed" -- \
  env PATH="$tmp/broken:$path" "$here/bench/gpu-check.sh"
if /usr/bin/python3 -c 'import torch, sys; sys.exit(torch.cuda.is_available())' 2>/dev/null; then
  expect gpu_without_cuda_torch 1 "but /usr/bin/python3's torch cannot use them" -- \
    env PATH="$tmp/one:$path" PYTHON=/usr/bin/python3 "$here/bench/gpu-check.sh"
else
  echo "skipped gpu_without_cuda_torch: /usr/bin/python3 has no torch without CUDA here"
fi
[ "$fails" -eq 0 ]
