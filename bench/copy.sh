#!/usr/bin/env bash
# Copy throughput: `cohort cp` next to cp -r, rsync -a and rclone copy (at its best --transfers)
# on (a) 20,000 files of 4-64 KiB and (b) four 1 GiB files, page cache warm (and cold when the
# kernel lets us drop caches), plus the machine's own copy bandwidth for one big file (dd) in the
# same run. Each copy goes into an empty directory; times are medians of RUNS runs.
#
#   bench/copy.sh            (RUNS=3 SMALL_FILES=20000 BIG_FILES=4 BIG_MB=1024 by default;
#                             BIG_FILES=0 skips the large set, CACHES=warm skips cold runs)
#
# Needs: build/cohort (scripts/setup), rsync and rclone (apt-get install rsync rclone), ~6 GiB of
# free disk under ${TMPDIR:-/tmp}.
set -euo pipefail
cd "$(dirname "$0")/.."
cohort=$PWD/build/cohort
RUNS=${RUNS:-3}
SMALL_FILES=${SMALL_FILES:-20000}
BIG_FILES=${BIG_FILES:-4}
BIG_MB=${BIG_MB:-1024}
work=$(mktemp -d "${TMPDIR:-/tmp}/cohort-copy-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "making the data sets in $work ..." >&2
python3 bench/make_datasets.py "$work" "$SMALL_FILES" "$BIG_FILES" "$BIG_MB" 100

can_drop=no
if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then can_drop=yes; fi

# Prints the median wall time in seconds of RUNS runs of: rm -rf dst; <command>.
median() {
  local cache=$1; shift
  local times=()
  for _ in $(seq "$RUNS"); do
    rm -rf "$work/dst"
    mkdir -p "$work/dst"
    sync
    if [ "$cache" = cold ]; then echo 3 > /proc/sys/vm/drop_caches; fi
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

report() {  # name set bytes seconds
  printf '| %s | %s | %.2f | %.0f |\n' "$1" "$2" "$4" "$(echo "$3 / $4 / 1048576" | bc -l)"
}

sets=(small)
[ "$BIG_FILES" -gt 0 ] && sets+=(large)
caches_wanted=${CACHES:-warm cold}
for set in "${sets[@]}"; do
  src=$work/$set
  bytes=$(du -sb "$src" | cut -f1)
  caches=()
  for c in $caches_wanted; do
    [ "$c" = cold ] && [ "$can_drop" != yes ] && continue
    caches+=("$c")
  done
  for cache in "${caches[@]}"; do
    echo
    echo "### $set files ($(find "$src" -type f | wc -l) files, $((bytes / 1048576)) MiB), page cache $cache"
    echo
    echo "| tool | set | seconds (median of $RUNS) | MiB/s |"
    echo "|---|---|---|---|"
    if [ "$set" = large ]; then
      t=$(median "$cache" sh -c "for f in '$src'/*; do dd if=\"\$f\" of='$work/dst/'\$(basename \"\$f\") bs=4M status=none; done")
      report "dd bs=4M, one file after another (the machine's copy bandwidth)" "$set" "$bytes" "$t"
    fi
    report "cp -r" "$set" "$bytes" "$(median "$cache" cp -r "$src/." "$work/dst/")"
    report "rsync -a" "$set" "$bytes" "$(median "$cache" rsync -a "$src/" "$work/dst/")"
    best_rclone=""
    for n in 4 8 16 32; do
      t=$(median "$cache" rclone copy --transfers "$n" --checkers "$n" "$src" "$work/dst")
      report "rclone copy --transfers $n" "$set" "$bytes" "$t"
    done
    for n in 8 16; do
      report "cohort cp --workers $n" "$set" "$bytes" \
        "$(median "$cache" "$cohort" cp -q --workers "$n" "$src" "$work/dst")"
    done
  done
done
[ "$can_drop" = yes ] || echo -e "\n(cold cache not measured: this machine does not allow dropping the page cache)"
