#!/usr/bin/env bash
# Where `sluice prep`'s CPU goes, by thread role and stage, from a sampled CPU profile (perf with
# DWARF call stacks, kernel stacks included: run as root or with perf_event_paranoid <= 1):
#
#   bench/prep/profile_prep.sh [BUILD_DIR] [RANKS]
#
# Profiles a prep of the corpus bench_prep_vs_mel.sh made last (BENCH_DIR, default
# /tmp/sluice-bench-prep-vs-mel; run that first), with RANKS ranks x 1 worker (default 1: no
# mpirun; SHARD_SIZE=N sets cache.shard_size, default the config's), then the mel alone on the same clips (its thread's CPU time; an older build that does
# not report it gives its wall time), and prints bench/prep/prep_profile.py's split.
# CPU-seconds come from the samples, so other load on the machine shifts them less than wall
# time; the shares are what to compare between builds. Numbers only: nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
ranks=${2:-1}
work=${BENCH_DIR:-/tmp/sluice-bench-prep-vs-mel}
sluice=$(realpath "$build/launcher/sluice")
[ -d "$work/corpus" ] || { echo "no corpus in $work: run bench/prep/bench_prep_vs_mel.sh first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=$work/profile
rm -rf "$out" && mkdir -p "$out"
launcher=""
[ "$ranks" -gt 1 ] && launcher="mpirun --bind-to none -np $ranks"
cat "$work"/clips/* >/dev/null
perf record -q -F 499 --call-graph dwarf,16384 -o "$out/perf.data" -- \
  $launcher "$sluice" prep --corpus "$work/corpus" --out "$out/cache" --threads 1 ${SHARD_SIZE:+--set cache.shard_size=$SHARD_SIZE} \
  >"$out/prep-log.txt" 2>&1
# The mel alone on the same clips (one pass per copy in the corpus), its thread's CPU time.
copies=$(( $(wc -l <"$work/corpus/metadata.csv") / $(ls "$work/clips" | wc -l) ))
mel_json=$("$sluice" bench mel --no-baseline --repeat "$copies" "$work/clips" | tail -1)
mel_cpu=$(echo "$mel_json" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["audio_seconds"] / d.get("sluice_mel_only_audio_s_per_cpu_s", d["sluice_mel_only_audio_s_per_s"]))')
total=$(perf report -i "$out/perf.data" --stdio --sort comm 2>/dev/null | awk '/Event count/ {print $NF / 1e9}')
perf script -i "$out/perf.data" -F comm,tid,ip,sym,dso 2>/dev/null >"$out/stacks.txt"
echo "prep of $work/corpus, $ranks rank(s) x 1 worker, $(uptime | sed 's/.*load/load/')"
/usr/bin/python3 bench/prep/prep_profile.py "$out/stacks.txt" "$total" "$mel_cpu"
