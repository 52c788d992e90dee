#!/usr/bin/env bash
# DeepSpeed under cohort next to DeepSpeed's own launcher: the same training script
# (examples/deepspeed/train.py, CPU, gloo), 4 ranks on this machine, run for run:
#   deepspeed   deepspeed --num_gpus 4 train.py --steps=S   (its launcher: runner, then launch.py,
#               then the ranks)
#   cohort      cohort run --framework deepspeed --nodes 2 --nproc-per-node 2 -- python3 train.py
#               --steps=S   (cohort starts every rank with the launcher's variables)
#   cohort+ds   cohort run ... -- deepspeed train.py --steps=S   (DeepSpeed's launcher once per
#               node, started by cohort)
# Each row: wall seconds from the command to its exit, and whether the final weights are the same
# bits as under deepspeed. Medians of RUNS; rounds take turns in a shuffled order.
# Run: bench/deepspeed.sh   (env: RUNS=5 STEPS=30 COHORT=build/cohort ENVS=build/envs)
# Needs the deepspeed preset environment: COHORT_ENVS=build/envs build/cohort env build deepspeed
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
ENVS=$(realpath "${ENVS:-build/envs}")
RUNS=${RUNS:-5}
STEPS=${STEPS:-30}
VENV=$ENVS/deepspeed/venv/bin
[ -x "$VENV/deepspeed" ] || { echo "no deepspeed environment in $ENVS: COHORT_ENVS=$ENVS $COHORT env build deepspeed" >&2; exit 2; }
TMP=$(mktemp -d /tmp/cohort-bench-deepspeed.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

COHORT=$COHORT ENVS=$ENVS VENV=$VENV python3 - "$TMP" "$RUNS" "$STEPS" "$PWD/examples/deepspeed" <<'PY'
import os, random, re, statistics, subprocess, sys, time
tmp, runs, steps, example = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cohort, venv = os.environ["COHORT"], os.environ["VENV"]
env = dict(os.environ, COHORT_ENVS=os.environ["ENVS"], PATH=venv + ":" + os.environ["PATH"])
run = [cohort, "run", "-q", "--data-root", f"{tmp}/dr", "--framework", "deepspeed",
       "--environment", "deepspeed", "--nodes", "2", "--nproc-per-node", "2", "--workdir", example, "--"]
launchers = {
    "deepspeed": [f"{venv}/deepspeed", "--num_gpus", "4", "train.py", f"--steps={steps}"],
    "cohort": run + ["python3", "train.py", f"--steps={steps}"],
    "cohort+ds": run + ["deepspeed", "train.py", f"--steps={steps}"],
}
weights = re.compile(r"weights identical on (\d+)/(\d+) ranks, sum (\S+)")
walls, sums = {}, {}
for r in range(runs):
    order = list(launchers.items())
    random.shuffle(order)
    for who, argv in order:
        start = time.monotonic()
        p = subprocess.run(argv, cwd=example, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900)
        wall = time.monotonic() - start
        m = weights.search(p.stdout)
        if p.returncode != 0 or not m:
            sys.exit(f"{who} failed ({p.returncode}):\n{p.stdout[-3000:]}")
        walls.setdefault(who, []).append(wall)
        sums.setdefault(who, set()).add(m.group(0))
    print(f"round {r + 1}/{runs} done", file=sys.stderr, flush=True)

base = statistics.median(walls["deepspeed"])
print(f"| launcher | wall s (median of {runs}) | / deepspeed | final weights |")
print("|---|---|---|---|")
for who in launchers:
    med = statistics.median(walls[who])
    same = "the same bits as deepspeed's" if sums[who] == sums["deepspeed"] else f"differ: {sums[who]}"
    if who == "deepspeed":
        same = ", ".join(sorted(sums[who]))
    print(f"| {who} | {med:.2f} | {med / base:.2f} | {same} |")
PY
