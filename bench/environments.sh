#!/usr/bin/env bash
# What an environment costs.
#   launch  a 4-rank job of `python3 -S -c pass` in the built pytorch preset (environment:
#           pytorch, command: [python3, ...]) against the same job naming the preset's
#           interpreter directly, in one hyperfine run; the difference is what looking the
#           environment up adds to a launch.
#   build   `cohort env create` of a custom environment on the built pytorch preset with
#           REQS, against `python3 -m venv --system-site-packages` + `pip install REQS` into a
#           fresh venv, alternated ROUNDS times (pip's cache warm for both: the first round of
#           each is a warm-up and is not counted). With BASELINE=path/to/an/earlier/cohort, that
#           build's `env create` too, in the same rounds.
#   image   the same 4-rank job in a container image (--image IMAGE, its own python3) against
#           the host's /usr/bin/python3 named directly; then where an image's time goes: asking
#           podman for the image once per job (podman image inspect), one rank's
#           `cohort env exec` of /bin/true against /bin/true itself, and, for comparison, a
#           `podman run` of /bin/true (what a container per rank would cost). IMAGE defaults to
#           the tests' image (tests/images/build: a few minutes the first time, then cached).
# Prints medians and ratios. PARTS="launch build image" chooses what runs.
# Run: bench/environments.sh   (env: RUNS=20 ROUNDS=4 REQS="termcolor==3.3.0 tabulate==0.9.0"
#                               COHORT=build/cohort PARTS="launch build image" IMAGE=REF
#                               BASELINE=)
# Needs hyperfine and python3-torch for /usr/bin/python3; the build part needs a package index;
# the image part needs root and podman (and runc for the podman run comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
if [ -n "${BASELINE:-}" ]; then BASELINE=$(realpath "$BASELINE"); fi
RUNS=${RUNS:-20}; ROUNDS=${ROUNDS:-4}; REQS=${REQS:-"termcolor==3.3.0 tabulate==0.9.0"}
PARTS=${PARTS:-"launch build image"}
part() { [[ " $PARTS " == *" $1 "* ]]; }
TMP=$(mktemp -d /tmp/cohort-bench-env.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export COHORT_ENVS=$TMP/envs

if part launch || part build; then
echo "== building the pytorch preset (not timed)" >&2
"$COHORT" env build pytorch >&2
python=$COHORT_ENVS/pytorch/venv/bin/python3
fi

run=(run --nodes 2 --nproc-per-node 2 --log-ranks none -q --data-root "$TMP/dr")
if part launch; then
echo "== launch" >&2
hyperfine -N --style basic --warmup 3 --runs "$RUNS" --prepare "rm -rf $TMP/dr" \
  --export-json "$TMP/launch.json" \
  -n direct "$COHORT ${run[*]} -- $python -S -c pass" \
  -n environment "$COHORT ${run[*]} --environment pytorch -- python3 -S -c pass" >&2
fi

if part build; then
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
  before=""
  if [ -n "${BASELINE:-}" ]; then
    "$BASELINE" env rm custom >/dev/null 2>&1 || true
    t3=$(date +%s%N)
    "$BASELINE" env create custom --from pytorch "${pips[@]}" >/dev/null 2>&1
    before=" $((($(date +%s%N) - t3) / 1000000))"
  fi
  [ "$round" -gt 0 ] && echo "$(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))$before" >> "$TMP/build.txt"
done
fi

if part image; then
IMAGE=${IMAGE:-$(tests/images/build)}
echo "== image ($IMAGE)" >&2
exec_args=(env exec --image "$IMAGE")
for d in $("$COHORT" env show "$IMAGE" --json |
           python3 -c 'import json, sys; print(" ".join(json.load(sys.stdin)["layers"]))'); do
  exec_args+=(--layer "$d")
done
exec_args+=(--bind "$TMP")
cd "$TMP"
hyperfine -N --style basic --warmup 3 --runs "$RUNS" --prepare "rm -rf $TMP/dr" \
  --export-json "$TMP/image.json" \
  -n direct "$COHORT ${run[*]} -- /usr/bin/python3 -S -c pass" \
  -n image "$COHORT ${run[*]} --image $IMAGE -- python3 -S -c pass" >&2
hyperfine -N --style basic --warmup 3 --runs "$RUNS" --export-json "$TMP/parts.json" \
  -n inspect "podman image inspect $IMAGE" \
  -n true "/bin/true" \
  -n exec "$COHORT ${exec_args[*]} -- /bin/true" >&2
if command -v runc >/dev/null; then
  hyperfine -N --style basic --warmup 2 --runs "$((RUNS < 10 ? RUNS : 10))" \
    --export-json "$TMP/podman.json" -n podman-run \
    "podman run --rm --runtime runc --network host --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 $IMAGE /bin/true" >&2
fi
cd - >/dev/null
fi

python3 - "$TMP" "$REQS" <<'EOF'
import json, os, statistics, sys
tmp, reqs = sys.argv[1], sys.argv[2]
def medians(name):
    path = f"{tmp}/{name}.json"
    if not os.path.exists(path):
        return None
    return {r["command"]: (r["median"] * 1e3, r.get("user", 0) * 1e3, r.get("system", 0) * 1e3)
            for r in json.load(open(path))["results"]}
med = medians("launch")
if med:
    print("| launch, 2x2 ranks of python3 -S | median | against direct |")
    print("|---|---:|---:|")
    print(f"| interpreter named directly | {med['direct'][0]:.1f} ms | |")
    print(f"| environment: pytorch | {med['environment'][0]:.1f} ms | {med['environment'][0] - med['direct'][0]:+.1f} ms |")
if os.path.exists(f"{tmp}/build.txt"):
    rows = [tuple(map(int, l.split())) for l in open(f"{tmp}/build.txt")]
    c = statistics.median(r[0] for r in rows); p = statistics.median(r[1] for r in rows)
    print(f"\n| build on the pytorch preset: {reqs} | rounds | median | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| cohort env create | {len(rows)} | {c / 1e3:.2f} s | {c / p:.2f}x |")
    if all(len(r) == 3 for r in rows):
        b = statistics.median(r[2] for r in rows)
        print(f"| BASELINE's cohort env create | {len(rows)} | {b / 1e3:.2f} s | {b / p:.2f}x |")
    print(f"| python3 -m venv + pip install | {len(rows)} | {p / 1e3:.2f} s | 1.00x |")
img, parts, podman = medians("image"), medians("parts"), medians("podman")
if img:
    print("\n| launch, 2x2 ranks of python3 -S | median | against direct | cohort's CPU (user+sys, all processes) |")
    print("|---|---:|---:|---:|")
    d, i = img["direct"], img["image"]
    print(f"| the host's /usr/bin/python3 | {d[0]:.1f} ms | | {d[1] + d[2]:.1f} ms |")
    print(f"| --image, the image's python3 | {i[0]:.1f} ms | {i[0] - d[0]:+.1f} ms | {i[1] + i[2]:.1f} ms |")
if parts:
    print("\n| where it goes | median | CPU (user+sys) |")
    print("|---|---:|---:|")
    print(f"| podman image inspect (once per job) | {parts['inspect'][0]:.1f} ms | {parts['inspect'][1] + parts['inspect'][2]:.1f} ms |")
    e, t = parts["exec"], parts["true"]
    print(f"| one rank: cohort env exec -- /bin/true, less /bin/true | {e[0] - t[0]:+.1f} ms | {e[1] + e[2] - t[1] - t[2]:+.1f} ms |")
if podman:
    p = podman["podman-run"]
    print(f"| for comparison, one podman run --rm of /bin/true | {p[0]:.1f} ms | {p[1] + p[2]:.1f} ms |")
EOF
