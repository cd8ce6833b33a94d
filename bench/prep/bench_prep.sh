#!/usr/bin/env bash
# Prep throughput: `sluice prep` against the torchaudio pipeline on the same clips and settings,
# in audio-seconds per wall second per core, plus scaling from 1 to 2 ranks. One run measures
# both sides, so the ratios compare like with like on this machine.
#
#   bench/prep/bench_prep.sh [BUILD_DIR] [COPIES]
#
# The corpus is the built-in sample corpus listed COPIES times (default 10) in one JSONL manifest
# under distinct ids, so that runs last long enough to measure; every pass reads the same files
# from the page cache (warmed first), for both sides alike. torchaudio does load + resample (when
# needed) + MelSpectrogram + log; sluice does that plus text normalisation, tokenisation and the
# HDF5 writes, so the ratio is conservative.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
copies=${2:-10}
sluice=$build/launcher/sluice
work=${BENCH_DIR:-/tmp/sluice-bench-prep}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

scripts/make-sample-corpus.sh data/sample-corpus >/dev/null
rm -rf "$work" && mkdir -p "$work"
corpus=$(realpath data/sample-corpus)
/usr/bin/python3 - "$corpus" "$copies" "$work/corpus.jsonl" <<'PY'
import json, sys
corpus, copies, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(line) for line in open(f"{corpus}/manifest.jsonl")]
with open(out, "w") as f:
    for copy in range(copies):
        for row in rows:
            f.write(json.dumps({**row, "id": f"{row['id']}-{copy}", "audio": f"{corpus}/{row['audio']}"}) + "\n")
PY
cat "$corpus"/wavs/*.wav > /dev/null  # page cache, for both sides

# The corpus lists absolute paths outside the manifest's folder; link them in so they stay inside the root.
ln -s "$corpus/wavs" "$work/wavs"
sed -i "s|\"$corpus/wavs/|\"wavs/|g" "$work/corpus.jsonl"

baseline=$(/usr/bin/python3 bench/dataset/torchaudio_baseline.py --threads 1 --repeat "$copies" "$corpus/wavs")
baseline_rate=$(echo "$baseline" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["audio_s_per_s"])')

run_prep() {  # ranks threads -> audio-s/s (wall, whole job incl. start-up and index)
  local ranks=$1 threads=$2 out="$work/cache-$1x$2"
  local launcher=""
  # --bind-to none: by default Open MPI pins each rank to one core, where its worker and writer
  # threads would then share that core.
  [ "$ranks" -gt 1 ] && launcher="mpirun --bind-to none -np $ranks"
  local start end
  start=$(date +%s.%N)
  $launcher "$sluice" prep --corpus "$work/corpus.jsonl" --out "$out" --threads "$threads" \
    --set cache.shard_size=64 >"$work/log-$1x$2.txt" 2>&1
  end=$(date +%s.%N)
  /usr/bin/python3 -c "import json; m=json.load(open('$out/manifest.json')); print(m['totals']['seconds']/($end-$start))"
}

one=$(run_prep 1 1)
two_threads=$(run_prep 1 2)
two_ranks=$(run_prep 2 1)
/usr/bin/python3 - "$baseline_rate" "$one" "$two_threads" "$two_ranks" "$copies" <<'PY'
import sys
base, one, two_threads, two_ranks, copies = map(float, sys.argv[1:])
print(f"corpus: sample corpus x {int(copies)}; machine cores: see nproc")
print(f"{'pipeline':<40}{'audio-s/s':>12}{'per core':>12}{'vs torchaudio':>16}")
print(f"{'torchaudio, 1 thread':<40}{base:>12.0f}{base:>12.0f}{1.0:>16.2f}")
for name, rate, cores in [("sluice prep, 1 rank x 1 thread", one, 1),
                          ("sluice prep, 1 rank x 2 threads", two_threads, 2),
                          ("sluice prep, 2 ranks x 1 thread", two_ranks, 2)]:
    print(f"{name:<40}{rate:>12.0f}{rate/cores:>12.0f}{rate/cores/base:>16.2f}")
print(f"scaling 1 -> 2 ranks: {two_ranks/one:.2f}x (ideal 2.00)")
PY
