#!/usr/bin/env bash
# What an environment costs.
#   launch  a 4-rank job of `python3 -S -c pass` in the built pytorch preset (environment:
#           pytorch, command: [python3, ...]) against the same job naming the preset's
#           interpreter directly, in one hyperfine run; the difference is what looking the
#           environment up adds to a launch.
#   build   `cohort env create` of a custom environment on the built pytorch preset with
#           REQS, against `python3 -m venv --system-site-packages` + `pip install REQS` into a
#           fresh venv, alternated ROUNDS times (pip's cache warm for both: the first round of
#           each is a warm-up and is not counted).
# Prints medians and ratios.
# Run: bench/environments.sh   (env: RUNS=20 ROUNDS=4 REQS="termcolor==3.3.0 tabulate==0.9.0"
#                               COHORT=build/cohort)
# Needs hyperfine and python3-torch for /usr/bin/python3; the build part needs a package index.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
RUNS=${RUNS:-20}; ROUNDS=${ROUNDS:-4}; REQS=${REQS:-"termcolor==3.3.0 tabulate==0.9.0"}
TMP=$(mktemp -d /tmp/cohort-bench-env.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export COHORT_ENVS=$TMP/envs

echo "== building the pytorch preset (not timed)" >&2
"$COHORT" env build pytorch >&2
python=$COHORT_ENVS/pytorch/venv/bin/python3

run=(run --nodes 2 --nproc-per-node 2 --log-ranks none -q --data-root "$TMP/dr")
echo "== launch" >&2
hyperfine -N --style basic --warmup 3 --runs "$RUNS" --prepare "rm -rf $TMP/dr" \
  --export-json "$TMP/launch.json" \
  -n direct "$COHORT ${run[*]} -- $python -S -c pass" \
  -n environment "$COHORT ${run[*]} --environment pytorch -- python3 -S -c pass" >&2

echo "== build ($REQS)" >&2
: > "$TMP/build.txt"
for ((round = 0; round <= ROUNDS; round++)); do
  "$COHORT" env rm custom >/dev/null 2>&1 || true
  rm -rf "$TMP/fresh"
  pips=()
  for r in $REQS; do pips+=(--pip "$r"); done
  t0=$(date +%s%N)
  "$COHORT" env create custom --from pytorch "${pips[@]}" >/dev/null 2>&1
  t1=$(date +%s%N)
  /usr/bin/python3 -m venv --system-site-packages "$TMP/fresh" &&
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$TMP/fresh/bin/pip" install -q $REQS >/dev/null
  t2=$(date +%s%N)
  [ "$round" -gt 0 ] && echo "$(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))" >> "$TMP/build.txt"
done

python3 - "$TMP" "$REQS" <<'EOF'
import json, statistics, sys
tmp, reqs = sys.argv[1], sys.argv[2]
med = {r["command"]: r["median"] * 1e3 for r in json.load(open(f"{tmp}/launch.json"))["results"]}
print("| launch, 2x2 ranks of python3 -S | median | against direct |")
print("|---|---:|---:|")
print(f"| interpreter named directly | {med['direct']:.1f} ms | |")
print(f"| environment: pytorch | {med['environment']:.1f} ms | {med['environment'] - med['direct']:+.1f} ms |")
rows = [tuple(map(int, l.split())) for l in open(f"{tmp}/build.txt")]
c = statistics.median(r[0] for r in rows); p = statistics.median(r[1] for r in rows)
print(f"\n| build on the pytorch preset: {reqs} | rounds | median | ratio |")
print("|---|---:|---:|---:|")
print(f"| cohort env create | {len(rows)} | {c / 1e3:.2f} s | {c / p:.2f}x |")
print(f"| python3 -m venv + pip install | {len(rows)} | {p / 1e3:.2f} s | 1.00x |")
EOF
