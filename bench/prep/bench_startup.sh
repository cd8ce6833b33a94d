#!/usr/bin/env bash
# Start-up and exit cost of the `sluice` executable: CPU (user + sys) and wall seconds of
# `sluice --version` and of a one-process `sluice prep` of a one-row corpus (MPI singleton start,
# listing, probe, one shard, index, manifest, report), ROUNDS times each (default 10), medians.
#
#   bench/prep/bench_startup.sh [BUILD_DIR]          BASELINE=OTHER_BUILD_DIR to interleave another build
#
# Each round runs the baseline's command, then this build's, so both see the same load.
# Numbers only: nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${ROUNDS:-10}
work=$(mktemp -d /tmp/sluice-bench-startup.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scripts/make-sample-corpus.sh data/sample-corpus >/dev/null
clips=(data/sample-corpus/wavs/*.wav)
cp "${clips[0]}" "$work/one.wav"  # a manifest's audio lies under its folder
echo '{"id":"one","audio":"one.wav","text":"One clip.","speaker":"s","language":"en"}' >"$work/one.jsonl"

builds=("$build")
[ -n "${BASELINE:-}" ] && builds=("$BASELINE" "$build")
# One timed command: "label wall user sys" appended to results.
timed() {
  local label=$1; shift
  /usr/bin/time -f "$label %e %U %S" -a -o "$work/results" "$@" >/dev/null 2>&1
}
for ((round = 0; round < rounds; round++)); do
  for b in "${builds[@]}"; do
    sluice=$(realpath "$b/launcher/sluice")
    timed "$b|--version" "$sluice" --version
    rm -rf "$work/cache"
    timed "$b|prep of one row" "$sluice" prep --corpus "$work/one.jsonl" --out "$work/cache"
  done
done
echo "medians of $rounds rounds; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$work/results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.rsplit(" ", 3)
    if len(parts) == 4 and "|" in parts[0]:
        rows[parts[0]].append(tuple(float(x) for x in parts[1:]))
print(f"{'build | command':<60}{'wall s':>8}{'CPU s':>8}{'user':>7}{'sys':>7}")
for key, runs in rows.items():
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] + r[2] for r in runs)
    print(f"{key:<60}{wall:>8.3f}{cpu:>8.3f}{statistics.median(r[1] for r in runs):>7.3f}{statistics.median(r[2] for r in runs):>7.3f}")
PY
