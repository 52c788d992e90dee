#!/usr/bin/env bash
# Runs every benchmark in order (launch, teardown, preload, scale, logs, observe, copy, server,
# mpi, network as root, the scheduler) and prints their tables. copy.sh needs about 6 GiB of free
# disk and takes about 15 minutes.
# Run: bench/run_all.sh   (each script's settings can be passed through the environment;
# see the comment at the top of each). Measure on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")"
echo "# cohort benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uptime | sed 's/.*load/load/')"
echo "peers: $(hyperfine --version), $(mpirun --version | head -1), torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), $(bash --version | head -1)"
for b in launch teardown preload scale logs observe copy server mpi; do
  echo; echo "## $b"; echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"; echo
  ./$b.sh
done
if [ "$(id -u)" = 0 ]; then
  echo; echo "## network"; echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"; echo
  ./network.sh
fi
echo; echo "## scheduler"; echo
../build/sched_bench
