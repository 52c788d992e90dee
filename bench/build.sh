#!/usr/bin/env bash
# What a new user waits for, from a clean clone with no compiler cache (CCACHE_DISABLE=1):
#   binary  `scripts/setup`: a new build/ configured, the console's `npm ci` and Vite build, the
#           `cohort` target compiled and linked
#   demo    `scripts/demo` in another clean clone: the same, then the main job to its trained
#           model
# Debian's packages must be installed already: their download and installation are not timed.
# CPU is user+sys of every process a step ran, steadier than wall time on a shared machine; the
# 1-minute load average is printed before and after each step, and the largest resident set of
# any one process (a compiler's, mostly). Prints a markdown table.
# Run: bench/build.sh   (env: REF=HEAD PARTS="binary demo")
set -euo pipefail
cd "$(dirname "$0")/.."
REF=$(git rev-parse "${REF:-HEAD}")
PARTS=${PARTS:-"binary demo"}
TMP=$(mktemp -d /tmp/cohort-bench-build.XXXXXX)
repo=$PWD
export CCACHE_DISABLE=1

clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# measure NAME COMMAND...: COMMAND in a clean clone of REF, timed.
measure() {
  local name=$1 dir=$TMP/$1 load wall user sys rss
  shift
  git clone -q "$repo" "$dir"
  git -C "$dir" checkout -q --detach "$REF"
  load=$(cut -d' ' -f1 /proc/loadavg)
  if ! (cd "$dir" && /usr/bin/time -o "$dir.time" -f '%e %U %S %M' "$@") >"$dir.log" 2>&1; then
    echo "bench/build.sh: $name failed; its output: $dir.log" >&2
    tail -n 20 "$dir.log" >&2
    exit 1
  fi
  read -r wall user sys rss <"$dir.time"
  printf '| %s | %s | %s | %d MiB | %s, %s |\n' "$name" "$(clock "${wall%.*}")" \
    "$(clock "$(echo "($user + $sys) / 1" | bc)")" $((rss / 1024)) "$load" \
    "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "clean clone of $(git log -1 --format='%h %s' "$REF"), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo
echo "| step | wall (m:ss) | CPU, user+sys (m:ss) | largest process | load average before, after |"
echo "|---|---:|---:|---:|---|"
for part in $PARTS; do
  case "$part" in
    binary) measure binary scripts/setup ;;
    demo) measure demo scripts/demo --data-root "$TMP/data" ;;
    *) echo "bench/build.sh: unknown part '$part' (binary, demo)" >&2; exit 2 ;;
  esac
done
rm -rf "$TMP"
