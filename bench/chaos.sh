#!/usr/bin/env bash
# Supervision under chaos: SCHEDULES randomized fault schedules (tests/chaos/chaos.py: pauses and
# SIGKILLs of the coordinator, agents and ranks, CPU starvation, a full disk as root; ranks that
# exit 0, non-zero or by a signal at random times, restarts) against real jobs, each verdict
# checked against the ranks' own ground truth. Prints one line per schedule and the summary:
# schedules run, the outcomes, and invariant violations (the target is 0). With BASELINE=path
# to an earlier cohort binary, the same schedules run against it too, for comparison.
# Run: bench/chaos.sh   (env: SCHEDULES=500 SEED=<random> COHORT=build/cohort BASELINE=)
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT=$(realpath "${COHORT:-build/cohort}")
RANK=$(dirname "$COHORT")/cohort-test-rank
SCHEDULES=${SCHEDULES:-500}
SEED=${SEED:-$RANDOM$RANDOM}
echo "# chaos: $SCHEDULES schedules from seed $SEED, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
status=0
tests/chaos/chaos.py --cohort "$COHORT" --test-rank "$RANK" --schedules "$SCHEDULES" \
  --seed "$SEED" | grep -v ': ok$' || status=$?
if [ -n "${BASELINE:-}" ]; then
  echo "# the same schedules against $BASELINE"
  tests/chaos/chaos.py --cohort "$(realpath "$BASELINE")" --test-rank "$RANK" \
    --schedules "$SCHEDULES" --seed "$SEED" | grep -v ': ok$' || true
fi
exit $status
