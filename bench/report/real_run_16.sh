#!/usr/bin/env bash
# A real train run with as many oversubscribed ranks as a 2-core machine holds (16 by default:
# the tiny model, a few steps), checking the end-of-run path at more than a handful of ranks:
# every rank wrote its own timeline/rank-N.json (rank 0 gathered only their sizes), the report was
# written from them, and it names 16 ranks. Not a test (minutes on 2 cores); prints what it found.
#
#   bench/report/real_run_16.sh [BUILD_DIR] [RANKS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
ranks=${2:-16}
steps=${3:-30}
sluice=$build/launcher/sluice
work=${BENCH_DIR:-/tmp/sluice-bench-real-run}
. bench/train/sample_cache.sh
sample_cache "$work" "$sluice" "$ranks"
rm -rf "$work/run"
start=$(date +%s.%N)
mpirun --oversubscribe --bind-to none -np "$ranks" "$sluice" train --cache "$work/cache" --run-dir "$work/run" \
  --steps "$steps" --set roles.data_per_node=4 --set train.validation_every=0 --set train.checkpoint_every=0 \
  --set runtime.status_every_s=0 --set runtime.timeout_s=120 >"$work/run.log" 2>&1
end=$(date +%s.%N)
files=$(ls "$work/run/timeline" | grep -c '^rank-[0-9]*\.json$')
world=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" "$work/run/report.json")
sent=$(grep -c 'does not see the timelines' "$work/run.log" || true)
echo "ranks $ranks, steps $steps: run $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }') s;" \
  "timeline files $files ($(du -sk "$work/run/timeline" | cut -f1) KB); report world_size $world;" \
  "ranks rank 0 could not see: $sent"
grep -E '^(input|compute|communication|straggler|cyclic|hang|descheduled|no verdict|padding)' "$work/run.log" | head -5
/usr/bin/time -f 'sluice report again: %e s, peak RSS %M KB' "$sluice" report "$work/run" >/dev/null
[ "$files" -eq "$ranks" ] && [ "$world" -eq "$ranks" ]
