#!/usr/bin/env bash
# Launch cost: N trivial ranks (/bin/true) started and waited for, N = 8, 64, 256.
# Compares, run for run:
#   floor      a bash loop starting N /bin/true in the background (RANK, WORLD_SIZE, ... set), then wait
#   cohort 1xN cohort run --nodes 1 --nproc-per-node N --log-ranks none -q
#   cohort 4xN cohort run --nodes 4 --nproc-per-node N/4 (4 simulated nodes)
#   mpirun     mpirun --oversubscribe -np N /bin/true
#   torchrun   python3 -m torch.distributed.run --standalone --no_python /bin/true
#   before     with BASELINE=path/to/an/earlier/cohort: that build, 1xN and 4xN/4
# The launchers take turns: each round runs every one once, in a shuffled order, so that the load
# of this machine, which drifts from second to second, weighs on all of them alike. Prints median
# wall times (ms) and ratios; "cohort / floor" is the median of each round's own ratio, with the
# middle half of those ratios beside it.
# Run: bench/launch.sh   (env: NS="8 64 256" RUNS=10 WARMUP=2 TORCHRUN=1 COHORT=build/cohort
#                         BASELINE=)
# Needs openmpi-bin, python3-torch for /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
NS=${NS:-"8 64 256"}; RUNS=${RUNS:-10}; WARMUP=${WARMUP:-2}; TORCHRUN=${TORCHRUN:-1}
BASELINE=${BASELINE:+$(realpath "$BASELINE")}
TMP=$(mktemp -d /tmp/cohort-bench-launch.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

cat > "$TMP/floor.sh" <<'EOF'
n=$1
for ((i = 0; i < n; i++)); do
  RANK=$i WORLD_SIZE=$n LOCAL_RANK=$i LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 /bin/true &
done
wait
EOF

COHORT=$COHORT BASELINE=$BASELINE TORCHRUN=$TORCHRUN python3 - "$TMP" "$RUNS" "$WARMUP" $NS <<'EOF'
import os, random, shutil, statistics, sys, time
tmp, runs, warmup, ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4:]]
cohort, baseline = os.environ["COHORT"], os.environ.get("BASELINE", "")

def launchers(n):
    run = lambda binary, nodes: [binary, "run", "--nodes", str(nodes), "--nproc-per-node",
                                 str(n // nodes), "--log-ranks", "none", "-q", "--data-root",
                                 f"{tmp}/dr", "--", "/bin/true"]
    out = {"floor": ["bash", f"{tmp}/floor.sh", str(n)], "cohort1": run(cohort, 1),
           "cohort4": run(cohort, 4),
           "mpirun": ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
                      "odls_base_cutoff", "100000", "-np", str(n), "/bin/true"]}
    if baseline:
        out["before1"], out["before4"] = run(baseline, 1), run(baseline, 4)
    if os.environ.get("TORCHRUN") == "1":
        out["torchrun"] = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", str(n), "--redirects", "1", "--tee", "1",
                           "--monitor_interval", "0.1", "--log_dir", f"{tmp}/tlog", "--no_python",
                           "/bin/true"]
    return out

def timed(argv):
    # torchrun starts with an empty log dir. cohort's data root is kept: every run makes a job
    # directory of its own, as a user's runs do, and deleting thousands of files between runs
    # would make ext4 slow to allocate the next run's (it skips recently deleted inodes).
    shutil.rmtree(f"{tmp}/tlog", ignore_errors=True)
    quiet = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_WRONLY, 0) for fd in (1, 2)]
    start = time.perf_counter_ns()
    pid = os.posix_spawn(shutil.which(argv[0]), argv, os.environ, file_actions=quiet)
    _, status = os.waitpid(pid, 0)
    ms = (time.perf_counter_ns() - start) / 1e6
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)}: exit status {os.waitstatus_to_exitcode(status)}")
    return ms

rng = random.Random(15)
results = {}
for n in ns:
    cmds = launchers(n)
    missing = sorted({argv[0] for argv in cmds.values() if not shutil.which(argv[0])})
    if missing:
        sys.exit(f"bench/launch.sh: not found: {', '.join(missing)} (see the comment at the top)")
    times = {name: [] for name in cmds}
    for r in range(warmup + runs):
        print(f"== launch N={n}: round {r + 1}/{warmup + runs}" + (" (warm-up)" if r < warmup else ""),
              file=sys.stderr)
        order = list(cmds)
        rng.shuffle(order)
        round_ms = {name: timed(cmds[name]) for name in order}
        if r >= warmup:
            for name, ms in round_ms.items():
                times[name].append(ms)
    results[n] = times

med = statistics.median
def paired(times, a, b):
    ratios = sorted(x / y for x, y in zip(times[a], times[b]))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return f"{med(ratios):.2f}x ({q[0]:.2f}-{q[2]:.2f})"
ms = lambda times, k: f"{med(times[k]):.1f} ms" if k in times else "not run"
print("| N | floor (bash loop) | cohort 1xN | cohort 4xN/4 | mpirun | torchrun | cohort 1xN / floor | cohort 4xN/4 / floor | cohort 1xN / mpirun | cohort 4xN/4 / mpirun |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n, t in results.items():
    print(f"| {n} | {ms(t, 'floor')} | {ms(t, 'cohort1')} | {ms(t, 'cohort4')} | {ms(t, 'mpirun')} | "
          f"{ms(t, 'torchrun')} | {paired(t, 'cohort1', 'floor')} | {paired(t, 'cohort4', 'floor')} | "
          f"{paired(t, 'cohort1', 'mpirun')} | {paired(t, 'cohort4', 'mpirun')} |")
if baseline:
    print("\n| N | before 1xN | before 4xN/4 | before 1xN / floor | before 4xN/4 / floor | now / before, 1xN | now / before, 4xN/4 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, t in results.items():
        print(f"| {n} | {ms(t, 'before1')} | {ms(t, 'before4')} | {paired(t, 'before1', 'floor')} | "
              f"{paired(t, 'before4', 'floor')} | {paired(t, 'cohort1', 'before1')} | "
              f"{paired(t, 'cohort4', 'before4')} |")
print(f"\nMedian wall time from start to exit of each launcher over {runs} rounds (after {warmup} "
      "warm-up rounds); every rank runs /bin/true. Ratios: the median of each round's ratio, and "
      "in brackets the middle half of them.")
EOF
