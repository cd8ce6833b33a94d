#!/usr/bin/env bash
# Soak: does memory stay flat over a long run? Trains the tiny built-in model on the sample
# corpus's cache (1 data rank feeding 2 model ranks, mpi transport) for MINUTES minutes, with
# checkpoints, validation and timing as in a real run, and samples every rank's resident memory
# every SAMPLE_S seconds (default 5): VmRSS, and VmHWM, the peak RSS since the previous sample
# (reset after each read by writing 5 to /proc/PID/clear_refs; VmRSS where the reset is refused),
# so that no step's peak falls between samples. At the end it stops the run with SIGTERM to every
# rank (a preemption: checkpoint, exit 4) and bench/soak/soak_summary.py judges the samples: per
# WINDOW_MIN-minute window (default 10) after WARMUP_MIN minutes (default 5), the high-water mark
# and the floor of every rank, the last window against the first (the measure and why:
# soak_summary.py), and the data rank's bound: train.credits (and the read-ahead) x the plan's
# largest batch x the model ranks it feeds. Rerun the summary alone on a finished WORK with
# `bench/soak/soak_summary.py WORK [WARMUP_MIN] [WINDOW_MIN]`.
#
#   bench/soak/soak.sh [BUILD_DIR] [MINUTES] [-- extra sluice train options]
#   ALLOCATOR=tcmalloc|glibc|jemalloc   the ranks' C allocator: tcmalloc (what `sluice` preloads
#                     into sluice-train by default, launcher/train_binary.h), glibc's
#                     (SLUICE_MALLOC=system), or Debian's libjemalloc2 preloaded into every rank
#                     (LD_PRELOAD through mpirun -x; sluice then leaves it alone)
#   BENCH_DIR=DIR     where it works (default /tmp/sluice-soak); two soaks side by side need two
#
# A benchmark, not a test: it runs niced (nice 10) and never fails on a number; it writes
# WORK/rss.tsv (seconds, rank, VmRSS KiB, peak KiB since the previous sample) and
# WORK/summary.txt. The binary is copied to WORK first, so rebuilding during the hour does not
# change what runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
minutes=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
work=${BENCH_DIR:-/tmp/sluice-soak}
mkdir -p "$work"
# sluice hands `train` to sluice-train beside it (docs/architecture.md): copy both.
cp "$build/launcher/sluice" "$build/launcher/sluice-train" "$work/"
sluice=$(realpath "$work/sluice")
allocator_env=()
case "${ALLOCATOR:-tcmalloc}" in
  tcmalloc) allocator_env=(-x SLUICE_MALLOC=tcmalloc) ;;
  glibc) allocator_env=(-x SLUICE_MALLOC=system) ;;
  jemalloc) allocator_env=(-x LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2) ;;
  *) echo "soak.sh: ALLOCATOR must be tcmalloc, glibc or jemalloc, not $ALLOCATOR" >&2; exit 2 ;;
esac
sample_s=${SAMPLE_S:-5}
warmup_min=${WARMUP_MIN:-5}
ranks=3
. bench/train/sample_cache.sh
sample_cache "$work" "$sluice" "$ranks"
rm -rf "$work/run" "$work/rss.tsv"

# Steps far beyond the time limit: the run ends by SIGTERM, as a preempted job does.
nice -n 10 $launcher "${allocator_env[@]}" "$sluice" train --cache "$work/cache" --run-dir "$work/run" --steps 100000000 \
  --set train.batch_size=8 --set train.n_buckets=2 --set train.log_every=500 \
  --set train.validation_every=2000 --set train.checkpoint_every=2000 "$@" >"$work/train.log" 2>&1 &
launcher_pid=$!

# The ranks are the sluice processes under this mpirun; OMPI_COMM_WORLD_RANK names each.
rank_pids() {
  for pid in $(pgrep -P "$launcher_pid" 2>/dev/null; pgrep -x sluice 2>/dev/null; pgrep -x sluice-train 2>/dev/null); do
    [ -r "/proc/$pid/environ" ] || continue
    local rank
    # Processes of other jobs come and go between pgrep and here: their errors are not ours.
    rank=$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    # Only this run's ranks: their command line names our run dir.
    if [ -n "$rank" ] && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$work/run"; then
      echo "$rank $pid"
    fi
  done | sort -n -u
}

start=$(date +%s)
end=$(( start + minutes * 60 ))
printf 'seconds\trank\tvmrss_kib\tpeak_kib\n' >"$work/rss.tsv"
while kill -0 "$launcher_pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
  now=$(( $(date +%s) - start ))
  while read -r rank pid; do
    read -r rss hwm < <(awk '/^VmRSS:/ {r = $2} /^VmHWM:/ {h = $2} END {print r, h}' "/proc/$pid/status" 2>/dev/null || true)
    # The peak since the last sample; reset for the next one (clear_refs 5: Linux 4.0 and later).
    if [ -n "$hwm" ] && { echo 5 >"/proc/$pid/clear_refs"; } 2>/dev/null; then peak=$hwm; else peak=$rss; fi
    [ -n "$rss" ] && printf '%s\t%s\t%s\t%s\n' "$now" "$rank" "$rss" "$peak" >>"$work/rss.tsv"
  done < <(rank_pids)
  sleep "$sample_s"
done
if kill -0 "$launcher_pid" 2>/dev/null; then
  # SIGTERM to every rank, as Slurm's preemption does (Open MPI's mpirun, given SIGTERM itself,
  # ends the ranks before a step of several seconds can finish and checkpoint: exit 1).
  while read -r rank pid; do kill -TERM "$pid" 2>/dev/null || true; done < <(rank_pids)
fi
status=0
wait "$launcher_pid" || status=$?
echo "sluice train exited $status after $(( ($(date +%s) - start) / 60 )) min (4 = stopped by SIGTERM, as intended)"

bench/soak/soak_summary.py "$work" "$warmup_min" "${WINDOW_MIN:-10}" | tee "$work/summary.txt"
