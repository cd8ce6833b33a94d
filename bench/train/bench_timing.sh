#!/usr/bin/env bash
# Recording overhead end to end: model-rank throughput (steady padded mel frames/s) with
# runtime.timing on, divided by the same run with it off, measured here in one session,
# alternating on/off runs so that drift in the machine's load hits both alike.
#
#   bench/train/bench_timing.sh [BUILD_DIR] [STEPS] [RANKS] [PAIRS]
#
# Goal (issue: timing): recording costs at most 1% of step time, i.e. a ratio >= 0.99. A single
# pair on a busy 2-core machine scatters by a few percent either way: use PAIRS >= 3 and read the
# median.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
steps=${2:-60}
ranks=${3:-3}
pairs=${4:-3}
sluice=$build/launcher/sluice
work=${BENCH_DIR:-/tmp/sluice-bench-timing}
. bench/train/sample_cache.sh
sample_cache "$work" "$sluice" "$ranks"
for pair in $(seq 1 "$pairs"); do
  for timing in true false; do
    rm -rf "$work/$timing-$pair"
    $launcher "$sluice" train --cache "$work/cache" --run-dir "$work/$timing-$pair" --steps "$steps" \
      --set train.validation_every=0 --set train.checkpoint_every=0 --set train.log_every=1000000 \
      --set runtime.status_every_s=0 --set runtime.timing=$timing >"$work/$timing-$pair.log" 2>&1
  done
done
/usr/bin/python3 - "$work" "$pairs" <<'PY'
import glob, json, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
def throughput(name):
    ranks = [json.load(open(f)) for f in glob.glob(f"{work}/{name}/ranks/rank-*.json")]
    return sum(r["steady_padded_frames_per_second"] for r in ranks if "steady_padded_frames_per_second" in r)
ratios = []
print(f"{'pair':<6}{'timing on frames/s':>20}{'timing off frames/s':>21}{'on/off':>9}")
for p in range(1, pairs + 1):
    on, off = throughput(f"true-{p}"), throughput(f"false-{p}")
    ratios.append(on / off)
    print(f"{p:<6}{on:>20.0f}{off:>21.0f}{on / off:>9.3f}")
print(f"recording overhead: on/off median {statistics.median(ratios):.3f} "
      f"(min {min(ratios):.3f}, max {max(ratios):.3f}); goal >= 0.99")
PY
