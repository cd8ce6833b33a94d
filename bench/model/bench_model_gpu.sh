#!/usr/bin/env bash
# Model throughput on the GPU machine: the tiny, small and base Transformer TTS, one training step
# after another on one CUDA device with bf16 autocast, in one table (samples/s, valid and padded
# mel frames/s, median step). Without a CUDA device torch can see it says so and exits 0.
#
#   bench/model/bench_model_gpu.sh [BUILD_DIR] [BATCH] [FRAMES] [STEPS] [DEVICE] [BF16]
#   defaults:                       build      32      800      30      cuda     on
# The batch is synthetic (tests/model/model_test_util.h): FRAMES padded mel frames per sample,
# lengths varying below it, FRAMES/5 tokens, 80 mels.
set -euo pipefail
build=${1:-build}
batch=${2:-32}
frames=${3:-800}
steps=${4:-30}
device=${5:-cuda}
bf16=${6:-on}
binary="$build/bench/model/bench_train_step"
if [[ ! -x "$binary" ]]; then
  echo "bench_model_gpu.sh: $binary not found; build it: cmake --build $build --target bench_train_step" >&2
  exit 2
fi
# Positional: size batch frames n_mels steps threads world_size (size is replaced by --table).
table=$("$binary" tiny "$batch" "$frames" 80 "$steps" 4 1 --device "$device" --bf16 "$bf16" --table tiny,small,base)
echo "$table"
# Only on a GPU torch can use (the table says "skipped" otherwise).
[[ $device == cuda* && $table != *skipped* ]] || exit 0
# What the GPU busy figure costs: the CUDA events around each step (model/trainer.cpp) on and off
# (SLUICE_GPU_STEP_TIMING=off), on the tiny model (the shortest steps: the worst case), 4 rounds
# interleaved; each round's median step time (throughput varied +-15% between processes on the H100).
rounds=4
echo "# CUDA step events' cost: tiny, $((steps * 2)) steps a run, events on / off, $rounds rounds interleaved (median step ms)"
on=() off=()
for round in $(seq $rounds); do
  on+=("$("$binary" tiny "$batch" "$frames" 80 $((steps * 2)) 4 1 --device "$device" --bf16 "$bf16" --table tiny |
    awk '!/^#/ {print $3}')")
  off+=("$(SLUICE_GPU_STEP_TIMING=off "$binary" tiny "$batch" "$frames" 80 $((steps * 2)) 4 1 --device "$device" \
    --bf16 "$bf16" --table tiny | awk '!/^#/ {print $3}')")
done
echo "events on:  ${on[*]}"
echo "events off: ${off[*]}"
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
awk -v on="$(median "${on[@]}")" -v off="$(median "${off[@]}")" \
  'BEGIN {printf "median step with events / without: %.4f (%.2f%% slower)\n", on / off, 100 * (on / off - 1)}'
