#!/usr/bin/env bash
# Every GPU check and GPU benchmark, for the GPU machine (one H100, CUDA 13, pip torch with CUDA;
# see ../shared/notes/TOOLCHAIN.md "GPU host"). That machine has no apt and no espeak-ng, so two
# ignored folders travel with the checkout: .gpu-deps (gpu-host-deps.sh and the .debs its
# `download` fetches: libsndfile, libsoxr) and data/sample-corpus (made here by
# scripts/make-sample-corpus.sh).
#
#   here:   mkdir -p .gpu-deps && cp ../shared/tools/gpu-host-deps.sh .gpu-deps/ &&
#           bash .gpu-deps/gpu-host-deps.sh download .gpu-deps && scripts/make-sample-corpus.sh data/sample-corpus
#   there:  bash scripts/gpu-check.sh build test      # device tool, carry .gpu-deps data/sample-corpus
#           bash scripts/gpu-check.sh build bench     # (the build is kept between calls while warm)
#
# Stages (any of): build, test (ctest -L gpu), bench (transport, model throughput, feed
# efficiency, max batch). Logs go to $OUT (the device tool brings them back) or ./gpu-check-out.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=build-gpu
jobs=$(nproc)
status=0
step() {  # name, command...: runs it with its log in $out/name.log, records failure, goes on
  local name=$1
  shift
  local started=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
  return $rc
}

# shellcheck disable=SC1091
source .gpu-deps/gpu-host-deps.sh unpack .gpu-deps
nvidia-smi >"$out/nvidia-smi.txt" 2>&1

for stage in "$@"; do
  case $stage in
  build)
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    step configure cmake -S . -B $build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DSLUICE_CUDA=ON -DTORCH_CUDA_ARCH_LIST=9.0 &&
      step build cmake --build $build -j "$jobs"
    # The tests' sample corpus fixture needs espeak-ng: use the carried corpus instead.
    rm -rf $build/sample-corpus && cp -r data/sample-corpus $build/sample-corpus
    ;;
  test)
    step ctest-gpu ctest --test-dir $build -L gpu -FA sample_corpus --output-on-failure --timeout 300
    grep -E "tests passed|Skipped|Failed|\\*\\*\\*" "$out/ctest-gpu.log" | tail -40 >>"$out/summary.txt"
    ;;
  bench)
    export BENCH_DIR=/tmp/sluice-gpu-bench
    mkdir -p $BENCH_DIR
    [ -f $BENCH_DIR/cache/manifest.json ] ||
      step prep $build/launcher/sluice prep --corpus data/sample-corpus --out $BENCH_DIR/cache
    step bench-transport-1rank $build/bench/runtime/bench_transport --gpu on
    step bench-transport-2ranks mpirun --bind-to none -np 2 $build/bench/runtime/bench_transport --gpu on
    step bench-model-bf16 bash bench/model/bench_model_gpu.sh $build
    step bench-model-fp32 bash bench/model/bench_model_gpu.sh $build 32 800 30 cuda off
    step feed-one-process bash bench/train/bench_feed.sh $build 300 1 -- --set model.device=cuda
    step feed-cuda-ipc bash bench/train/bench_feed.sh $build 300 2 -- --set model.device=cuda
    step feed-cuda-ipc-normalised bash bench/train/bench_feed.sh $build 300 2 -- --set model.device=cuda \
      --set train.normalize_mels=true --set train.time_masks=2 --set train.freq_masks=2
    step feature-transform-gpu $build/bench/model/bench_feature_transform cuda:0
    step max-batch $build/launcher/sluice bench max-batch --set model.device=cuda --set model.size=base
    ;;
  *)
    echo "gpu-check.sh: unknown stage '$stage' (build, test, bench)" >&2
    exit 2
    ;;
  esac
done
cat "$out/summary.txt"
exit $status
