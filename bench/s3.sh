#!/usr/bin/env bash
# S3 transfers: `cohort cp` next to `aws s3 cp --recursive` (awscli from PyPI) and `rclone copy`
# against one real S3 server (versitygw, which checks every signature, serving a directory on
# this machine), up, down, and from one bucket to another of the same server (s3:// to s3://,
# which all three hand to the server: CopyObject / UploadPartCopy), on (a) many small files and
# (b) a few large ones, in one run. Each upload or copy goes to an empty prefix and each
# download into an empty directory (so nothing is skipped); times are hyperfine's medians of
# RUNS runs.
#
#   bench/s3.sh       (RUNS=5 SMALL_FILES=2000 BIG_FILES=3 BIG_MB=256 by default)
#   BASELINE=path/to/an/earlier/cohort bench/s3.sh    adds that build's times, "before" (up and
#                                                     down: an earlier cohort may not copy s3:// to s3://)
#   COHORT=path/to/cohort bench/s3.sh                 another build than build/cohort
#
# Needs: build/cohort and build/go-bin/versitygw (scripts/setup), hyperfine and rclone
# (apt-get install hyperfine rclone); awscli is installed into build/venv-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cohort=${COHORT:-$root/build/cohort}
gw=$root/build/go-bin/versitygw
RUNS=${RUNS:-5}
SMALL_FILES=${SMALL_FILES:-2000}
BIG_FILES=${BIG_FILES:-3}
BIG_MB=${BIG_MB:-256}
[ -x "$gw" ] || { echo "bench/s3.sh: no $gw (run scripts/setup)" >&2; exit 1; }
command -v rclone >/dev/null || { echo "bench/s3.sh: needs rclone (apt-get install rclone)" >&2; exit 1; }
venv=$root/build/venv-bench
if [ ! -x "$venv/bin/aws" ]; then
  echo "installing awscli into $venv ..." >&2
  python3 -m venv "$venv" && "$venv/bin/pip" install -q awscli >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cohort-s3-bench.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/served/bench" "$work/served/copies"
ROOT_ACCESS_KEY_ID=benchkey ROOT_SECRET_ACCESS_KEY=benchsecret \
  "$gw" --port "127.0.0.1:$port" posix "$work/served" >"$work/gw.log" 2>&1 &
gw_pid=$!
trap 'kill $gw_pid 2>/dev/null; wait $gw_pid 2>/dev/null; rm -rf "$work"' EXIT
unset AWS_CA_BUNDLE  # plain http here; rclone 1.60 fails when it is set
export AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other
export RCLONE_CONFIG_S3_ENDPOINT=$AWS_ENDPOINT_URL RCLONE_CONFIG_S3_ACCESS_KEY_ID=benchkey
export RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=benchsecret RCLONE_CONFIG_S3_REGION=us-east-1
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

echo "making the data sets in $work ..." >&2
python3 bench/make_datasets.py "$work" "$SMALL_FILES" "$BIG_FILES" "$BIG_MB" 20
aws="$venv/bin/aws"
"$cohort" cp -q "$work/small" s3://bench/seed-small
"$cohort" cp -q "$work/large" s3://bench/seed-large

results=$work/results.tsv
run() {  # name set direction command prepare
  hyperfine -N --style none --runs "$RUNS" --warmup 1 --prepare "$5" \
    --export-json "$work/h.json" "$4" >/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(sys.argv[2], sys.argv[3], sys.argv[4], r["median"], sep="\t")' \
    "$work/h.json" "$1" "$2" "$3" >>"$results"
}
for set in small large; do
  echo "$set: up ..." >&2
  clean="rm -rf $work/served/bench/up-$set"
  run cohort "$set" up "$cohort cp -q $work/$set s3://bench/up-$set" "$clean"
  [ -z "${BASELINE:-}" ] || run before "$set" up "$BASELINE cp -q $work/$set s3://bench/up-$set" "$clean"
  run "aws s3 cp" "$set" up "$aws s3 cp --recursive --quiet $work/$set s3://bench/up-$set" "$clean"
  run rclone "$set" up "rclone copy --transfers 8 $work/$set s3:bench/up-$set" "$clean"
  echo "$set: down ..." >&2
  clean="rm -rf $work/down"
  run cohort "$set" down "$cohort cp -q s3://bench/seed-$set $work/down" "$clean"
  [ -z "${BASELINE:-}" ] || run before "$set" down "$BASELINE cp -q s3://bench/seed-$set $work/down" "$clean"
  run "aws s3 cp" "$set" down "$aws s3 cp --recursive --quiet s3://bench/seed-$set $work/down" "$clean"
  run rclone "$set" down "rclone copy --transfers 8 s3:bench/seed-$set $work/down" "$clean"
  echo "$set: s3 to s3 ..." >&2
  clean="rm -rf $work/served/copies/$set"
  run cohort "$set" copy "$cohort cp -q s3://bench/seed-$set s3://copies/$set" "$clean"
  run "aws s3 cp" "$set" copy "$aws s3 cp --recursive --quiet s3://bench/seed-$set s3://copies/$set" "$clean"
  run rclone "$set" copy "rclone copy --transfers 8 s3:bench/seed-$set s3:copies/$set" "$clean"
done

python3 - "$results" "$SMALL_FILES" "$BIG_FILES" "$BIG_MB" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
t = {(r[0], r[1], r[2]): float(r[3]) for r in rows}
size = {"small": f"{sys.argv[2]} files of 4-64 KiB", "large": f"{sys.argv[3]} files of {sys.argv[4]} MiB"}
before = any(k[0] == "before" for k in t)
print("| set | direction | cohort cp | aws s3 cp | rclone copy | cohort / aws | cohort / rclone |"
      + (" before | cohort / before |" if before else ""))
print("|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if before else ""))
for s in ("small", "large"):
    for d in ("up", "down", "copy"):
        c, a, r = t[("cohort", s, d)], t[("aws s3 cp", s, d)], t[("rclone", s, d)]
        name = "s3 to s3" if d == "copy" else d
        line = f"| {size[s]} | {name} | {c:.2f} s | {a:.2f} s | {r:.2f} s | {c/a:.2f}x | {c/r:.2f}x |"
        if before:
            b = t.get(("before", s, d))
            line += f" {b:.2f} s | {c/b:.2f}x |" if b else " - | - |"
        print(line)
PY
