#!/usr/bin/env bash
# Input-pipeline efficiency: model-rank throughput with the real feed (data rank -> model ranks
# over the configured transport) divided by the throughput of replaying the same sequence of
# batch shapes from memory on the model ranks (train.replay_from_memory), both measured here,
# in one run, after a warm-up. 1.0 means the feed costs the model ranks nothing.
#
#   bench/train/bench_feed.sh [BUILD_DIR] [STEPS] [RANKS] [-- extra sluice train options]
#
# Uses the sample corpus's cache (made if missing), or CACHE=DIR (any cache). RANKS = 1 measures the
# in-process feed (a data thread in the model's process), RANKS >= 2 the MPI feed from one data
# rank (or cuda_ipc on one GPU). The run directories stay in BENCH_DIR (default /tmp/sluice-bench-feed):
# feed/ and replay/ of the last call, with their reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
steps=${2:-60}
ranks=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
sluice=$build/launcher/sluice
work=${BENCH_DIR:-/tmp/sluice-bench-feed}
. bench/train/sample_cache.sh
sample_cache "$work" "$sluice" "$ranks" "${CACHE:-}"
cache=${CACHE:-$work/cache}
run() {  # name, extra settings
  rm -rf "$work/$1"
  $launcher "$sluice" train --cache "$cache" --run-dir "$work/$1" --steps "$steps" \
    --set train.validation_every=0 --set train.checkpoint_every=0 --set train.log_every=1000000 \
    "${@:2}" >"$work/$1.log" 2>&1
}
# ROUNDS > 1: feed and replay alternate, each pair one round (feed-N, replay-N), so that both
# see the same machine; the efficiency is the median of the rounds' (on the H100 one pair's two
# processes differed by up to 20% in step time for the same work).
rounds=${ROUNDS:-1}
for round in $(seq "$rounds"); do
  suffix=$([ "$rounds" -gt 1 ] && echo "-$round" || true)
  run "feed$suffix" "$@"
  run "replay$suffix" --set train.replay_from_memory=true "$@"
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import glob, json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def model_ranks(name):
    ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{name}/ranks/rank-*.json"))]
    return [r for r in ranks if r["role"] == "model" or "steady_seconds" in r]
def busy(r):  # GPU busy share of the steady steps (CUDA events); '-' on the CPU
    b = r.get("steady_gpu_busy_fraction")
    return "-" if b is None else f"{b:.1%}"
print(f"{'round':<7}{'model rank':<12}{'feed frames/s':>15}{'replay frames/s':>17}{'efficiency':>12}{'input wait':>12}"
      f"{'feed samples/s':>16}{'GPU busy feed':>15}{'GPU busy replay':>17}")
means = []
for round in range(1, rounds + 1):
    suffix = f"-{round}" if rounds > 1 else ""
    feed, replay = model_ranks("feed" + suffix), model_ranks("replay" + suffix)
    ratios = []
    for f, r in zip(feed, replay):
        ratio = f["steady_padded_frames_per_second"] / r["steady_padded_frames_per_second"]
        ratios.append(ratio)
        wait = f["input_wait_seconds"] / f["wall_seconds"]
        print(f"{round:<7}{f['rank']:<12}{f['steady_padded_frames_per_second']:>15.0f}"
              f"{r['steady_padded_frames_per_second']:>17.0f}{ratio:>12.3f}{wait:>11.1%}"
              f"{f.get('steady_samples_per_second', float('nan')):>16.1f}{busy(f):>15}{busy(r):>17}")
    means.append(sum(ratios) / len(ratios))
    steady = feed[0]["steady_steps"]
spread = f", rounds {min(means):.3f}-{max(means):.3f}" if rounds > 1 else ""
print(f"input-pipeline efficiency (mean over model ranks, median of {rounds} round(s), {steady} steady steps): "
      f"{statistics.median(means):.3f}{spread} (goal >= 0.98)")
PY
