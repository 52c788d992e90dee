#!/usr/bin/env bash
# What a job's own network costs at its start: a sandboxed job of N nodes (one /bin/true rank
# each, N = 1, 4, 16) run with `cohort run --isolate --run-as 2000001:2000001`, as a root
# server's coordinator runs an account's job (its files made by the account's worker), with
# its nodes in networks of their own (--job-network isolated, what a root server gives every
# job) and on the machine's network (--job-network host), the two taking turns in shuffled
# rounds so that the machine's load weighs on both alike. Prints the median wall time of each
# and the median of each round's difference, per node. Needs root (network namespaces) and
# bubblewrap.
# Run: sudo bench/network.sh   (env: NS="1 4 16" RUNS=15 WARMUP=2 COHORT=build/cohort)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
NS=${NS:-"1 4 16"}; RUNS=${RUNS:-15}; WARMUP=${WARMUP:-2}
if [ "$(id -u)" != 0 ]; then echo "bench/network.sh: needs root (network namespaces)" >&2; exit 2; fi
TMP=$(mktemp -d /tmp/cohort-bench-network.XXXXXX)
chmod 755 "$TMP"  # the account's user (--run-as) enters it
trap 'rm -rf "$TMP"' EXIT

COHORT=$COHORT python3 - "$TMP" "$RUNS" "$WARMUP" $NS <<'EOF'
import os, random, statistics, sys, time
tmp, runs, warmup, ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4:]]
cohort = os.environ["COHORT"]

def argv(n, network):
    return [cohort, "run", "--isolate", "--run-as", "2000001:2000001", "--job-network", network,
            "--nodes", str(n),
            "--nproc-per-node", "1", "--log-ranks", "none", "-q", "--data-root", f"{tmp}/dr",
            "--", "/bin/true"]

def timed(args):
    quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_WRONLY, 0) for fd in (1, 2)]
    start = time.perf_counter_ns()
    pid = os.posix_spawn(args[0], args, os.environ, file_actions=quiet)
    _, status = os.waitpid(pid, 0)
    ms = (time.perf_counter_ns() - start) / 1e6
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(args)}: exit status {os.waitstatus_to_exitcode(status)}")
    return ms

rng = random.Random(37)
med = statistics.median
print("| nodes | machine's network | own network | added (median of each round's) | added per node |")
print("|---:|---:|---:|---:|---:|")
for n in ns:
    times = {"host": [], "isolated": []}
    for r in range(warmup + runs):
        print(f"== network N={n}: round {r + 1}/{warmup + runs}" + (" (warm-up)" if r < warmup else ""),
              file=sys.stderr)
        order = ["host", "isolated"]
        rng.shuffle(order)
        got = {k: timed(argv(n, k)) for k in order}
        if r >= warmup:
            for k, ms in got.items():
                times[k].append(ms)
    added = med([b - a for a, b in zip(times["host"], times["isolated"])])
    print(f"| {n} | {med(times['host']):.1f} ms | {med(times['isolated']):.1f} ms | "
          f"{added:.1f} ms | {added / n:.1f} ms |", flush=True)
print(f"\nMedian wall times of `cohort run --isolate` over {runs} rounds (after {warmup} warm-up "
      "rounds), each node one /bin/true rank.")
EOF
