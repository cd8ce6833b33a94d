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
# What the GPU busy figure costs: the CUDA events around each step (model/trainer.cpp), A/B inside
# one process (two trainers stepped alternately, one made with SLUICE_GPU_STEP_TIMING=off), on the
# tiny model (the shortest steps: the worst case). Separate processes differed by up to +-7%.
"$binary" tiny "$batch" "$frames" 80 $((steps * 4)) 4 1 --device "$device" --bf16 "$bf16" --events-ab on
