#!/usr/bin/env bash
# A real run directory to clone for bench_report_scale.sh (TEMPLATE=): the quick start's 3-rank
# train (1 data rank feeding 2 model ranks, tiny model, 300 steps) on the sample corpus's cache.
#
#   bench/report/make_template.sh [BUILD_DIR] [OUT_DIR]      (default: build /tmp/sluice-report-template)
#   then: BASELINE=OTHER_SLUICE TEMPLATE=OUT_DIR/run bench/report/bench_report_scale.sh BUILD_DIR 256 1024 4096
#
# Its timelines' size depends on the machine's load while it trains: CpuWatch records an interval
# for every 5 ms the process could not run, so a loaded machine gives more stall intervals (250-450
# KB a rank measured on 2 loaded cores, ~86 KB of spans alone). Compare builds on the same template.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-/tmp/sluice-report-template}
sluice=$(realpath "$build/launcher/sluice")
. bench/train/sample_cache.sh
sample_cache "$out" "$sluice" 3
rm -rf "$out/run"
$launcher "$sluice" train -c configs/train.yaml --cache "$out/cache" --run-dir "$out/run" --steps 300 \
  >"$out/train.log" 2>&1
echo "template: $out/run ($(du -sk "$out/run/timeline" | cut -f1) KB of timelines for 3 ranks)"
