#!/usr/bin/env bash
# Every GPU check and GPU benchmark, for one short visit to the GPU machine (one H100, CUDA 13, pip
# torch 2.11; ../shared/notes/TOOLCHAIN.md "GPU host"). The visit is 15 minutes of device time,
# start-up included, at most 10 minutes a call, and the machine is kept between calls only 30 s:
# so the stages run in order of importance, each under a time limit taken from one deadline, and
# every stage leaves a line in $OUT/summary.txt and its log in $OUT/logs.tgz at once, so that what
# finished comes back even when the call is cut off.
#
#   here (once):  mkdir -p .gpu-deps && cp ../shared/tools/{gpu-host-deps.sh,peer_baseline.py} .gpu-deps/ &&
#                 bash .gpu-deps/gpu-host-deps.sh download .gpu-deps && scripts/make-sample-corpus.sh data/sample-corpus
#   there:        DEADLINE=488 bash scripts/gpu-check.sh build test train eta-tiny eta-base python maxbatch \
#                     doctor eta-small model peer                    # visit 2's call (420 s of 500)
#                 # device tool, carrying .gpu-deps and data/sample-corpus (no apt, no espeak-ng there);
#                 # what the deadline cut off runs in a second call at once (warm: the build is kept)
#
# Stages:
#   build      configure (Release, no debug info, CUDA, sm_90) and build the sluice_gpu_checks target set
#   test       ctest -L gpu (the memory-hungry max-batch case alone, after the others)
#   train      sluice train on the GPU: one process, then 2 ranks sharing the GPU over cuda_ipc with
#              normalisation and masks on the data rank's GPU; each continued with --resume; the reports
#   eta-SIZE   input-pipeline efficiency (bench/train/bench_feed.sh) of model.size SIZE (tiny, base,
#              small) in bf16, one process and cuda_ipc, batch 32, on the peer's corpus (the same clips)
#   peer       ../shared/tools/peer_baseline.py: PyTorch DataLoader feeding on the same GPU
#   transport  bench_transport --gpu on, 1 and 2 ranks (cuda_ipc / d2d, nccl / send-to-self)
#   model      bench/model/bench_model_gpu.sh: tiny, small, base in bf16 (samples/s, frames/s, MFU)
#   maxbatch   sluice bench max-batch for base
#   python     bench/python/eta_pair.sh: a Python rank on the GPU fed over cuda_ipc vs a DataLoader
#   doctor     sluice doctor with model.device=cuda
#   features   bench_feature_transform on cuda:0
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
logs=/tmp/gpu-check-logs          # kept between calls while the machine stays warm
bench=/tmp/sluice-gpu-bench
build=build-gpu
deadline=${DEADLINE:-540}         # seconds this call may use; stages get what is left
mkdir -p "$out" "$logs" "$bench"
status=0

pack() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
note() { echo "$*" | tee -a "$out/summary.txt"; }
left() { echo $((deadline - SECONDS)); }
# step NAME LIMIT COMMAND...: runs COMMAND with its log in $logs/NAME.log under min(LIMIT, what is
# left - 10 s), records its exit and time, packs the logs; skipped when under 20 s are left.
step() {
  local name=$1 limit=$2
  shift 2
  local room=$(($(left) - 10))
  if [ "$room" -lt 20 ]; then
    note "$name: skipped, $(left) s left"
    return 1
  fi
  [ "$limit" -gt "$room" ] && limit=$room
  local started=$SECONDS
  # Through bash, so that COMMAND may be one of the exported functions below.
  timeout --kill-after=5 "$limit" bash -c '"$@"' bash "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local how="exit $rc"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && how="TIMED OUT after $limit s"
  note "$name: $how in $((SECONDS - started)) s"
  [ $rc -eq 0 ] || status=1
  pack
  return $rc
}
# Lines of a finished step's log worth reading in the summary.
keep() { grep -E "$2" "$logs/$1.log" 2>/dev/null | tail -"${3:-40}" | sed "s/^/  [$1] /" >>"$out/summary.txt"; }

# The Debian packages the image lacks, unpacked under /tmp/sys (exports PKG_CONFIG_PATH,
# LD_LIBRARY_PATH, CMAKE_PREFIX_PATH, TORCH_PREFIX, ESPEAK_DATA_PATH and MPI's run-as-root).
# shellcheck disable=SC1091
source .gpu-deps/gpu-host-deps.sh unpack .gpu-deps
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Debian 12's libespeak-ng needs libpcaudio, which needs ALSA and PulseAudio, absent from the image:
# the link failed on them. sluice never plays audio, so a stub with pcaudio's symbols (each one
# failing) stands in for it, at link and at load time.
pcaudio=/tmp/sys/usr/lib/x86_64-linux-gnu/libpcaudio.so.0
rm -f "$pcaudio"*
cc -shared -fPIC -Wl,-soname,libpcaudio.so.0 -o "$pcaudio" -x c - <<'C'
struct audio_object;
struct audio_object* create_audio_device_object(const char* d, const char* a, const char* s) { return 0; }
int audio_object_open(struct audio_object* o, int format, unsigned rate, unsigned char channels) { return -1; }
void audio_object_close(struct audio_object* o) {}
void audio_object_destroy(struct audio_object* o) {}
int audio_object_write(struct audio_object* o, const void* data, unsigned long bytes) { return -1; }
int audio_object_drain(struct audio_object* o) { return -1; }
int audio_object_flush(struct audio_object* o) { return -1; }
const char* audio_object_strerror(struct audio_object* o, int error) { return "no audio output (stub)"; }
C
sluice=$build/launcher/sluice
sample_cache=$bench/sample-cache
peer_cache=$bench/peer-cache
export build bench sluice sample_cache

configure() {
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DSLUICE_CUDA=ON -DTORCH_CUDA_ARCH_LIST=9.0 "$@"
}
# -k: every target that can be built is, so that one broken file costs one check, not the visit.
build_gpu_checks() {
  local keep_going=(-k)
  [ -f "$build/build.ninja" ] && keep_going=(-k 0)
  cmake --build "$build" --target sluice_gpu_checks -j "$(nproc)" -- "${keep_going[@]}"
}
# NAME RANKS SETTINGS...: 60 steps of sluice train on GPU 0, continued with --resume to 90, then the
# head of the report (GPU busy, verdicts).
gpu_train() {
  local name=$1 ranks=$2
  shift 2
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(mpirun --bind-to none -np "$ranks")
  rm -rf "$bench/$name"
  "${launch[@]}" "$sluice" train --cache "$sample_cache" --run-dir "$bench/$name" --steps 60 \
    --set model.device=cuda --set train.checkpoint_every=30 --set train.validation_every=30 "$@" &&
    "${launch[@]}" "$sluice" train --cache "$sample_cache" --run-dir "$bench/$name" --steps 90 --resume \
      --set model.device=cuda --set train.checkpoint_every=30 --set train.validation_every=30 "$@" &&
    head -12 "$bench/$name/report.md"
}
# SIZE RANKS: bench/train/bench_feed.sh on the peer's corpus, batch 32, bf16 (model.bf16's default),
# 3 interleaved feed/replay rounds (one pair's processes differed by up to 20% on the H100).
eta() {
  ROUNDS=3 CACHE=$peer_cache BENCH_DIR=$bench/eta-$1-$2 bash bench/train/bench_feed.sh "$build" 60 "$2" -- \
    --set model.device=cuda --set model.size="$1" --set train.batch_size=32 --set train.n_buckets=4
}
export -f configure build_gpu_checks gpu_train eta
export peer_cache

{
  nvidia-smi
  echo "python3: $(command -v python3) $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1)"
  echo "cmake: $(cmake --version | head -1); ninja: $(ninja --version 2>&1); mpirun: $(mpirun --version 2>&1 | head -1)"
  echo "nproc: $(nproc)"
} >"$logs/machine.log" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); $(grep '^python3' "$logs/machine.log")"

# The peer's synthetic corpus (1024 clips of 2-8 s; peer_baseline.py's own first part), made in the
# background while sluice builds, then prepared by sluice as an LJSpeech folder: both sides of the
# comparison train on the same clips.
make_peer_corpus() {
  PYTHONUNBUFFERED=1 python3 -c 'exec(open(".gpu-deps/peer_baseline.py").read().split("\ndef pad(")[0])' &&
    python3 - <<'PY'
import random
from scipy.io import wavfile
words = "the quick brown fox jumps over a lazy dog while seven bright stars shine on quiet water".split()
rng = random.Random(1)
with open("/tmp/peer/metadata.csv", "w") as out:
    for i in range(1024):
        rate, audio = wavfile.read(f"/tmp/peer/wavs/{i}.wav")
        n = max(3, int(len(audio) / rate * 3))  # about 15 characters a second
        text = " ".join(rng.choice(words) for _ in range(n))
        out.write(f"{i}|{text}|{text}\n")
PY
}

need_sample_cache() {
  [ -f $sample_cache/manifest.json ] || step prep-sample 60 $sluice prep --corpus data/sample-corpus --out $sample_cache
}

for stage in "$@"; do
  case $stage in
  build)
    if [ ! -f /tmp/peer/metadata.csv ]; then (make_peer_corpus >"$logs/peer-corpus.log" 2>&1 &); fi
    python_args=()
    # The Python rank's module for the interpreter that has CUDA torch, with its own pybind11 when it
    # has one (Debian 12's 2.10 predates Python 3.12); none when it lacks Python.h.
    if [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then
      python_args=(-DPYTHON_EXECUTABLE="$(command -v python3)" -DPython_EXECUTABLE="$(command -v python3)")
      pybind11_dir=$(python3 -m pybind11 --cmakedir 2>/dev/null) && python_args+=(-Dpybind11_DIR="$pybind11_dir")
    else
      python_args=(-DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON)
      note "build: no Python.h for $(command -v python3): the Python module is not built"
    fi
    if ! step configure 120 configure "${python_args[@]}"; then
      keep configure "Error|error|not found|NOTFOUND" 30
      rm -rf $build
      step configure-without-python 120 configure -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON
    fi
    keep configure "sluice:|tcmalloc|Python model ranks|pybind11|CUDA" 10
    step build 420 build_gpu_checks
    keep build "error:|Error|FAILED" 40
    # The tests' sample-corpus fixture needs espeak-ng: the carried corpus stands in for it.
    rm -rf $build/sample-corpus && cp -r data/sample-corpus $build/sample-corpus
    # A first GPU run with tcmalloc preloaded into sluice-train (the default); should it fail, the
    # rest runs with glibc's malloc (SLUICE_MALLOC=system) and the summary says so.
    need_sample_cache
    if ! step smoke 60 $sluice train --cache $sample_cache --run-dir $bench/smoke --steps 3 --set model.device=cuda; then
      keep smoke "error|Error|signal|Segmentation" 10
      if step smoke-system-malloc 60 env SLUICE_MALLOC=system $sluice train --cache $sample_cache \
        --run-dir $bench/smoke --steps 3 --set model.device=cuda; then
        export SLUICE_MALLOC=system
        note "smoke: fails with tcmalloc, passes with glibc's malloc: SLUICE_MALLOC=system from here on"
      fi
    fi
    ;;
  test)
    step ctest-gpu 240 ctest --test-dir $build -L gpu -E MaxBatch -FA sample_corpus -j 4 --output-on-failure --timeout 150
    keep ctest-gpu "tests passed|Skipped|Failed|\\*\\*\\*|Not Run" 40
    step ctest-max-batch 90 ctest --test-dir $build -R MaxBatch --output-on-failure --timeout 80
    keep ctest-max-batch "tests passed|Failed|\\*\\*\\*" 5
    ;;
  train)
    need_sample_cache
    step train-one-process 90 gpu_train train-one-process 1
    keep train-one-process "GPU busy|loss|resumed|transport|plan|GPU|error" 30
    step train-cuda-ipc 120 gpu_train train-cuda-ipc 2 --set train.normalize_mels=true --set train.time_masks=2 \
      --set train.freq_masks=2 --set roles.model_gpu_memory_fraction=0.6 --set roles.data_gpu_memory_fraction=0.1
    keep train-cuda-ipc "GPU busy|loss|resumed|transport|plan|GPU|cuda:0|error" 30
    mkdir -p "$logs/reports"
    for r in train-one-process train-cuda-ipc; do cp "$bench/$r/report.md" "$logs/reports/$r.md" 2>/dev/null; done
    pack
    ;;
  eta-tiny | eta-base | eta-small)
    for _ in $(seq 90); do [ -f /tmp/peer/metadata.csv ] && break; sleep 1; done
    [ -f $peer_cache/manifest.json ] ||
      step prep-peer 90 mpirun --bind-to none -np 8 $sluice prep --corpus /tmp/peer --out $peer_cache
    for ranks in 1 2; do
      step "$stage-$ranks" 150 eta "${stage#eta-}" "$ranks"
      keep "$stage-$ranks" "round|^[0-9]|efficiency" 8
      mkdir -p "$logs/runs"
      for f in "$bench/eta-${stage#eta-}-$ranks"/*.log; do cp "$f" "$logs/runs/$stage-$ranks-$(basename "$f")" 2>/dev/null; done
    done
    pack
    ;;
  peer)
    step peer 200 env PYTHONUNBUFFERED=1 python3 .gpu-deps/peer_baseline.py
    keep peer "\\[|corpus" 20
    ;;
  transport)
    step transport-1rank 60 $build/bench/runtime/bench_transport --gpu on
    keep transport-1rank "^ |ratio|#" 20
    step transport-2ranks 60 mpirun --bind-to none -np 2 $build/bench/runtime/bench_transport --gpu on
    keep transport-2ranks "^ |ratio|#" 20
    ;;
  model)
    step model-bf16 90 bash bench/model/bench_model_gpu.sh $build
    keep model-bf16 "." 12
    ;;
  maxbatch)
    step max-batch 90 $sluice bench max-batch --set model.device=cuda --set model.size=base
    keep max-batch "." 12
    ;;
  python)
    need_sample_cache
    mkdir -p $bench/python && ln -sfn $sample_cache $bench/python/cache
    # PYTHONFAULTHANDLER: should the Python rank crash again (SIGSEGV in visit 2, cause unknown), its
    # log gets every Python thread's stack beside Open MPI's native backtrace.
    step python-rank 120 env PYTHON=python3 PYTHONFAULTHANDLER=1 BENCH_DIR=$bench/python bash bench/python/eta_pair.sh \
      $build 1 80 0,2 -- --set model.device=cuda
    keep python-rank "eta|load" 6
    grep -h -E -A12 "Fatal Python error|Process received signal" $bench/python/*.log 2>/dev/null | head -60 |
      sed "s/^/  [python-rank crash] /" >>"$out/summary.txt"
    # The runs' own logs (the Python rank crashed in visit 2 and its log stayed there).
    mkdir -p "$logs/runs" && cp $bench/python/*.log "$logs/runs/" 2>/dev/null
    pack
    ;;
  doctor)
    need_sample_cache
    step doctor 60 $sluice doctor --set model.device=cuda --cache $sample_cache
    keep doctor "." 30
    ;;
  features)
    step feature-transform 60 $build/bench/model/bench_feature_transform cuda:0
    keep feature-transform "." 12
    ;;
  *)
    note "gpu-check.sh: unknown stage '$stage'"
    status=2
    ;;
  esac
done
note "done in $SECONDS s, exit $status"
pack
exit $status
