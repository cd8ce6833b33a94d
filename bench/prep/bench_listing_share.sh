#!/usr/bin/env bash
# The listing read once (runtime/prep/listing_share.h): each rank's file-system calls on a
# VCTK-sized listing, and the listing's encoded size against its fields' bytes.
#
#   bench/prep/bench_listing_share.sh [BUILD_DIR] [SPEAKERS] [UTTERANCES] [RANKS]
#
# Makes a VCTK 0.92 layout of SPEAKERS x UTTERANCES rows (default 110 x 400 = 44,000, VCTK's size):
# txt/pNNN/pNNN_MMM.txt with the sample sentences in turn, and wav48_silence_trimmed/pNNN/
# pNNN_MMM_mic1.flac as dangling links (the listing takes a link without following it; the probe
# then rejects every row as missing_audio, cheaply, so the run measures the listing, not the
# decoding). Runs `sluice prep` on RANKS ranks (default 3), each under its own strace, and prints
# per rank the calls (openat, stat family, getdents64, ...) that name a path under txt/ and under
# the corpus, and rank 0's log line with the encoded size. Numbers only: nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
speakers=${2:-110}
utterances=${3:-400}
ranks=${4:-3}
sluice=$(realpath "$build/launcher/sluice")
work=${BENCH_DIR:-/tmp/sluice-bench-listing-share}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v strace >/dev/null || { echo "strace is needed (scripts/install-deps.sh)" >&2; exit 1; }

corpus=$work/corpus
stamp="$speakers x $utterances"
if [ "$(cat "$work/corpus.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$work" && mkdir -p "$corpus"
  python3 - "$corpus" "$speakers" "$utterances" data/sentences/en.txt <<'PY'
import os, sys
corpus, speakers, utterances, sentences = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = [l.strip() for l in open(sentences, encoding="utf-8") if l.strip()]
row = 0
for s in range(speakers):
    speaker = "p%03d" % (225 + s)
    os.makedirs(f"{corpus}/txt/{speaker}")
    os.makedirs(f"{corpus}/wav48_silence_trimmed/{speaker}")
    for u in range(1, utterances + 1):
        name = "%s_%03d" % (speaker, u)
        with open(f"{corpus}/txt/{speaker}/{name}.txt", "w", encoding="utf-8") as f:
            f.write(lines[row % len(lines)] + "\n")
        os.symlink(f"/nonexistent/{name}.flac", f"{corpus}/wav48_silence_trimmed/{speaker}/{name}_mic1.flac")
        row += 1
PY
  echo "$stamp" >"$work/corpus.stamp"
fi

calls=openat,open,stat,lstat,newfstatat,statx,access,faccessat,faccessat2,getdents64,readlink
rm -rf "$work/traces" "$work/cache" && mkdir -p "$work/traces"
start=$(date +%s.%N)
set +e
mpirun --oversubscribe --bind-to none -np "$ranks" sh -c "exec strace -f -qq -e trace=$calls \
  -o $work/traces/rank-\$OMPI_COMM_WORLD_RANK.trace $sluice prep --corpus $corpus --out $work/cache \
  --set prep.max_reject_fraction=1" >"$work/prep.log" 2>&1
code=$?
set -e
echo "rows: $((speakers * utterances)), ranks: $ranks, sluice prep exit $code in $(echo "$(date +%s.%N) - $start" | bc) s (under strace)"
grep -o 'corpus listing: .*' "$work/prep.log" | head -1 || true
raw=$(find "$corpus/txt" -name '*.txt' -printf '%s\n' | awk '{s += $1} END {print s}')
echo "transcript files: $(find "$corpus/txt" -name '*.txt' | wc -l), $raw bytes"
for trace in "$work"/traces/rank-*.trace; do
  rank=$(basename "$trace" .trace)
  printf '%s: %6d calls under txt/, %6d under the corpus\n' "$rank" \
    "$(grep -c "\"$corpus/txt" "$trace" || true)" "$(grep -c "\"$corpus" "$trace" || true)"
done
