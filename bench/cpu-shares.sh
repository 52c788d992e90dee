#!/usr/bin/env bash
# CPU under contention: two jobs at once, each one rank that keeps SPIN busy processes spinning
# for SECONDS_BUSY seconds, on a machine with fewer CPUs than spinners. The rank reports the CPU
# time its processes got (bash's `times`).
#   cohort     job "small" asks resources.cpus 0.5, job "large" 1.5, run side by side with
#              `cohort run`: each rank is held to its CPUs (cgroup v1 cpu.cfs_quota_us and
#              cpu.shares, or v2 cpu.max and cpu.weight)
#   plain      the same two spinners started by bash, no limits: the scheduler splits evenly
# Reports each job's CPU seconds and the large/small ratio (asked: 3).
# Needs root (cgroups). Run: bench/cpu-shares.sh   (env: COHORT=build/cohort SECONDS_BUSY=10 SPIN=2)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
BUSY=${SECONDS_BUSY:-10}; SPIN=${SPIN:-2}
TMP=$(mktemp -d /tmp/cohort-bench-cpu.XXXXXX)
cleanup() { pgrep -f "$TMP/" | xargs -r kill -9 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# spin.sh OUT: SPIN busy loops for BUSY seconds; writes the children's user+sys seconds to OUT.
cat > "$TMP/spin.sh" <<EOF
end=\$((SECONDS + $BUSY))
for ((i = 0; i < $SPIN; i++)); do ( while [ \$SECONDS -lt \$end ]; do :; done ) & done
wait
times > "\$1.times"  # not in a pipeline: a subshell would report its own children
tail -1 "\$1.times" | awk '{ split(\$1, u, /[ms]/); split(\$2, s, /[ms]/); print u[1]*60 + u[2] + s[1]*60 + s[2] }' > "\$1"
EOF

job() {  # job NAME CPUS
  cat > "$TMP/$1.yaml" <<EOF
name: cpu-$1
framework: generic
workdir: $TMP
command: [bash, $TMP/spin.sh, $TMP/$1.cpu]
roles:
  worker:
    resources: {cpus: $2}
EOF
}
job small 0.5
job large 1.5

echo "cpus: $(nproc), cgroup: $(stat -fc %T /sys/fs/cgroup), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$COHORT" run -f "$TMP/small.yaml" --data-root "$TMP/data" > "$TMP/small.out" 2>&1 &
a=$!
"$COHORT" run -f "$TMP/large.yaml" --data-root "$TMP/data" > "$TMP/large.out" 2>&1 &
b=$!
wait $a || { echo "small job failed:"; tail "$TMP/small.out"; exit 1; }
wait $b || { echo "large job failed:"; tail "$TMP/large.out"; exit 1; }
grep -h "not enforced" "$TMP/small.out" "$TMP/large.out" | head -1 || true
small=$(cat "$TMP/small.cpu"); large=$(cat "$TMP/large.cpu")

bash "$TMP/spin.sh" "$TMP/plain-a.cpu" & a=$!
bash "$TMP/spin.sh" "$TMP/plain-b.cpu" & b=$!
wait $a $b
pa=$(cat "$TMP/plain-a.cpu"); pb=$(cat "$TMP/plain-b.cpu")

printf '%-8s %-22s %-22s %s\n' run "small (cpus 0.5)" "large (cpus 1.5)" "large/small"
printf '%-8s %-22s %-22s %s\n' cohort "${small} s" "${large} s" \
  "$(awk -v a="$small" -v b="$large" 'BEGIN { printf "%.2f", b / a }')"
printf '%-8s %-22s %-22s %s\n' plain "${pa} s" "${pb} s" \
  "$(awk -v a="$pa" -v b="$pb" 'BEGIN { printf "%.2f", b / a }')"
echo "(each over ${BUSY} s of wall time, ${SPIN} spinning processes a rank)"
