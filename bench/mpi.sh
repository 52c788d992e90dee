#!/usr/bin/env bash
# MPI under cohort next to plain mpirun: the communication itself, not the launch. Each row runs
# the same program both ways on this machine, run for run:
#   mpirun   mpirun --oversubscribe -np N /usr/bin/python3 ...   (Open MPI's defaults: as many
#            slots as cores, so more ranks than cores yield while they wait)
#   cohort   cohort run --framework mpi --nodes 2 --nproc-per-node N/2 -- /usr/bin/python3 ...
#            (one mpirun for the job, with the hostfile cohort writes)
#   before   with BASELINE=path/to/an/earlier/cohort: that build, the same way
# Rows: mpi4py's ports of the OSU micro-benchmarks (its sources' demo/, fetched by
# tests/mpi4py/sources; the OSU suite itself is not in Debian): osu_latency and osu_bw on 2 ranks,
# osu_bcast and osu_allgather on 4 ranks (oversubscribed on 2 cores), at a small and a large
# message; and mpi4py's own test suite (point-to-point and collective modules) on 4 ranks, wall
# seconds; and Horovod's allreduce on 4 ranks (bench/mpi_horovod.py), where tests/horovod/build
# has built Horovod into build/horovod. Prints each row's median per launcher and cohort / mpirun
# (lower is better for every row but bandwidth). Rounds take turns in a shuffled order, so the
# machine's drift weighs on all.
# Run: bench/mpi.sh   (env: RUNS=5 COHORT=build/cohort BASELINE= SUITE="-i test_p2p_obj ..."
#                     ROWS=REGEX: only the rows whose name matches, e.g. ROWS=horovod)
# Needs openmpi-bin and python3-mpi4py (Debian), and PyPI once for mpi4py's sources.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
BASELINE=${BASELINE:+$(realpath "$BASELINE")}
RUNS=${RUNS:-5}
SUITE=${SUITE:-"-i test_p2p_obj -i test_cco_obj -i test_p2p_buf -i test_cco_buf"}
SRC=$(tests/mpi4py/sources)
TMP=$(mktemp -d /tmp/cohort-bench-mpi.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

HOROVOD=$PWD/build/horovod/bin/python3
[ -x "$HOROVOD" ] || HOROVOD=
COHORT=$COHORT BASELINE=$BASELINE SUITE=$SUITE HOROVOD=$HOROVOD ROWS=${ROWS:-} \
  python3 - "$TMP" "$RUNS" "$SRC" "$PWD/bench" <<'PY'
import os, random, re, statistics, subprocess, sys, time
tmp, runs, src, bench = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
osu = f"{bench}/mpi_osu.py"
cohort, baseline, suite = os.environ["COHORT"], os.environ.get("BASELINE", ""), os.environ["SUITE"].split()
horovod = os.environ["HOROVOD"]
root = ["--allow-run-as-root"] if os.geteuid() == 0 else []

def program(row):
    if row["what"] == "suite":
        return ["/usr/bin/python3", f"{src}/test/runtests.py", "-q", "--no-builddir"] + suite
    if row["what"] == "horovod":
        return [horovod, f"{bench}/mpi_horovod.py"] + [str(size) for size in row["sizes"]]
    return ["/usr/bin/python3", osu, f"{src}/demo", row["what"], str(row["max"])]

def launchers(row):
    n, cmd = row["np"], program(row)
    out = {"mpirun": ["mpirun"] + root + ["--oversubscribe", "-np", str(n)] + cmd}
    run = lambda binary: [binary, "run", "--framework", "mpi", "--nodes", "2", "--nproc-per-node",
                          str(n // 2), "-q", "--data-root", f"{tmp}/dr", "--workdir", tmp, "--"] + cmd
    out["cohort"] = run(cohort)
    if baseline:
        out["before"] = run(baseline)
    return out

rows = [
    {"name": "osu_latency 2 ranks", "what": "latency", "np": 2, "max": 65536, "sizes": [8, 65536], "unit": "us"},
    {"name": "osu_bw 2 ranks", "what": "bw", "np": 2, "max": 1 << 20, "sizes": [8, 1 << 20], "unit": "MB/s"},
    {"name": "osu_bcast 4 ranks", "what": "bcast", "np": 4, "max": 65536, "sizes": [8, 65536], "unit": "us"},
    {"name": "osu_allgather 4 ranks", "what": "allgather", "np": 4, "max": 65536, "sizes": [8, 65536], "unit": "us"},
    {"name": "mpi4py suite 4 ranks", "what": "suite", "np": 4, "unit": "s"},
]
if horovod:
    rows.append({"name": "horovod allreduce 4 ranks", "what": "horovod", "np": 4, "sizes": [8, 1 << 20], "unit": "us"})
else:
    print("no Horovod in build/horovod (tests/horovod/build): its row is left out", file=sys.stderr)
rows = [row for row in rows if re.search(os.environ["ROWS"], row["name"])]
line = re.compile(r"(?:^|\] )(\d+)\s+([0-9.]+)\s*$")
results = {}  # (row name, size or None, launcher) -> [values]

def once(row, who, argv):
    start = time.monotonic()
    p = subprocess.run(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"{row['name']} under {who} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    if row["what"] == "suite":
        results.setdefault((row["name"], None, who), []).append(wall)
        return
    seen = {int(m.group(1)): float(m.group(2)) for m in map(line.search, p.stdout.splitlines()) if m}
    for size in row["sizes"]:
        results.setdefault((row["name"], size, who), []).append(seen[size])

for r in range(runs):
    for row in rows:
        order = list(launchers(row).items())
        random.shuffle(order)
        for who, argv in order:
            once(row, who, argv)
    print(f"round {r + 1}/{runs} done", file=sys.stderr, flush=True)

def size_text(size):
    return "" if size is None else (f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1024 else f"{size} B")

whos = ["mpirun", "cohort"] + (["before"] if baseline else [])
print(f"| row | {' | '.join(whos)} | cohort / mpirun |" + (" before / mpirun |" if baseline else ""))
print("|---|" + "---|" * (len(whos) + 1 + (1 if baseline else 0)))
for row in rows:
    for size in row.get("sizes", [None]):
        med = {w: statistics.median(results[(row["name"], size, w)]) for w in whos}
        cells = [f"{med[w]:.2f} {row['unit']}" for w in whos]
        ratio = f"{med['cohort'] / med['mpirun']:.2f}"
        extra = f" {med['before'] / med['mpirun']:.2f} |" if baseline else ""
        print(f"| {row['name']} {size_text(size)} | {' | '.join(cells)} | {ratio} |{extra}")
PY
