#!/usr/bin/env bash
# Two hosts over SSH (tests/ssh/cluster: network namespaces with real sshd, brought up and torn
# down here), a trivial gloo job with 2 ranks per host (import torch, init_process_group, one
# all-reduce, a barrier), launchers side by side, REPS rounds interleaved:
#   cohort     cohort run --hosts h1,h2 --ssh "ssh -F CONFIG" --nproc-per-node 2 (its binary is
#              in the hosts' caches after the first round, which is not counted)
#   torchrun   by hand: `ssh hI torchrun --nnodes 2 --node_rank I --master_addr h1's ...` for
#              each host at once (static rendezvous: c10d's looks the host's name up, which
#              these hosts cannot; --monitor_interval 0.1, --redirects 1 --tee 1), wait
#   mpirun     mpirun --hostfile (h1 slots=2, h2 slots=2) over the same ssh, 4 ranks
# start: wall time of the whole job, command typed to command returned.
# teardown: the same job where the last rank (on h2) exits 1 after the barrier and the others
# sleep 300: wall time until the launcher returns with every rank stopped (120 s at most).
# Run: bench/ssh.sh   (root; env: REPS=5 COHORT=build/cohort; needs Debian's python3-torch for
# /usr/bin/python3, openmpi-bin for the mpirun rows)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
REPS=${REPS:-5}
STATE=$(mktemp -d /tmp/cohort-bench-ssh.XXXXXX)
cleanup() { tests/ssh/cluster down "$STATE" >/dev/null 2>&1 || true; rm -rf "$STATE"; }
trap cleanup EXIT
COHORT_SSH_NODES=2 tests/ssh/cluster up "$STATE" >&2
CONFIG=$STATE/ssh_config
WORK=$STATE/work  # seen by every host (only private/ is theirs)
mkdir -p "$WORK"
cat > "$WORK/gloo.py" <<'EOF'
import os, sys, time, torch
import torch.distributed as dist
for a, b in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")):
    os.environ.setdefault(a, os.environ.get(b, "0"))
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.barrier()
if len(sys.argv) > 1:  # teardown: the last rank fails, the others sleep
    if dist.get_rank() == dist.get_world_size() - 1:
        sys.exit(1)
    time.sleep(300)
dist.destroy_process_group()
EOF
printf 'h1 slots=2\nh2 slots=2\n' > "$WORK/hostfile"
# The hosts' ranks advertise their eth0 (gloo's default would be the loopback's name).
export GLOO_SOCKET_IFNAME=eth0

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

cohort_job() {
  "$COHORT" run --hosts h1,h2 --ssh "ssh -F $CONFIG" --nproc-per-node 2 --data-root "$STATE/data" \
    --workdir "$WORK" --env GLOO_SOCKET_IFNAME=eth0 --log-ranks none -q -- /usr/bin/python3 gloo.py "$@"
}
torchrun_job() {
  local port=$((29600 + RANDOM % 1000)) pids=() i rc=0
  for i in 0 1; do
    ssh -F "$CONFIG" "h$((i + 1))" "cd $WORK && GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 -m torch.distributed.run \
      --nnodes 2 --node_rank $i --nproc_per_node 2 --master_addr 10.88.0.11 --master_port $port \
      --monitor_interval 0.1 --redirects 1 --tee 1 gloo.py $*" >/dev/null 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
mpirun_job() {
  mpirun --allow-run-as-root --hostfile "$WORK/hostfile" -np 4 --mca plm_rsh_agent "ssh -F $CONFIG" \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x GLOO_SOCKET_IFNAME=eth0 \
    -x MASTER_ADDR=10.88.0.11 -x MASTER_PORT=$((29600 + RANDOM % 1000)) --wdir "$WORK" \
    /usr/bin/python3 gloo.py "$@" >/dev/null 2>&1
}
left() {  # processes of the job still on the hosts
  local n=0 h
  for h in h1 h2; do n=$((n + $(tests/ssh/cluster leftovers "$h" "$STATE" | grep -c '^process' || true))); done
  echo "$n"
}

export COHORT CONFIG STATE WORK
export -f cohort_job torchrun_job mpirun_job

launchers=(cohort torchrun)
command -v mpirun >/dev/null && launchers+=(mpirun)
cohort_job >/dev/null 2>&1 || true  # the first round copies cohort to the hosts
: > "$STATE/results"
for ((r = 1; r <= REPS; r++)); do
  for l in "${launchers[@]}"; do
    for kind in start teardown; do
      args=()
      [ "$kind" = teardown ] && args=(fail)
      t0=$(now); rc=0
      timeout 120 bash -c '"$0" "$@"' "${l}_job" "${args[@]}" >/dev/null 2>&1 || rc=$?
      t1=$(now)
      sleep 1  # what a launcher left behind has had time to go
      echo "$l $kind $(elapsed "$t0" "$t1") $rc $(left)" >> "$STATE/results"
      echo "round $r: $l $kind $(elapsed "$t0" "$t1") s (exit $rc, left $(left))" >&2
      # Nothing may leak into the next round: what is left in the hosts' namespaces, by pid.
      for h in h1 h2; do
        tests/ssh/cluster leftovers "$h" "$STATE" | sed -n 's/^process \([0-9]*\):.*/\1/p' |
          xargs -r kill -9 2>/dev/null || true
      done
    done
  done
done
echo
echo "| launcher | start (median s) | teardown after a failure (median s) | exit codes (teardown) | processes left |"
echo "|---|---|---|---|---|"
for l in "${launchers[@]}"; do
  median() { awk -v l="$l" -v k="$1" '$1 == l && $2 == k {print $3}' "$STATE/results" | sort -n |
             awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }
  codes=$(awk -v l="$l" '$1 == l && $2 == "teardown" {print $4}' "$STATE/results" | sort -u | paste -sd/)
  leftover=$(awk -v l="$l" '$1 == l {s += $5} END {print s + 0}' "$STATE/results")
  echo "| $l | $(median start) | $(median teardown) | $codes | $leftover |"
done
