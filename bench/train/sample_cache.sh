# Sourced by the bench/train scripts: the sample corpus's cache for benchmark runs, and the
# environment and launcher they share.
#   sample_cache WORK SLUICE RANKS [CACHE]   makes WORK/cache (once; not when CACHE names another
#                                            cache) and sets $launcher for RANKS ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

sample_cache() {
  local work=$1 sluice=$2 ranks=$3 other=${4:-}
  mkdir -p "$work"
  # A cache made earlier is reused (the GPU machine has no espeak-ng to make the corpus) unless it
  # predates the mel statistics (train.normalize_mels needs them).
  if [ -z "$other" ] && ! grep -q '"mel_statistics"' "$work/cache/manifest.json" 2>/dev/null; then
    rm -rf "$work/cache"
    scripts/make-sample-corpus.sh data/sample-corpus >/dev/null
    "$sluice" prep --corpus data/sample-corpus --out "$work/cache" >/dev/null 2>&1
  fi
  launcher=""
  if [ "$ranks" -gt 1 ]; then launcher="mpirun --bind-to none -np $ranks"; fi
}
