#!/usr/bin/env bash
# Soak: does memory stay flat over a long run? Trains the tiny built-in model on the sample
# corpus's cache (1 data rank feeding 2 model ranks, mpi transport) for MINUTES minutes, with
# checkpoints, validation and timing as in a real run, and samples every rank's resident memory
# (VmRSS from /proc/PID/status) every SAMPLE_S seconds (default 5). A model rank's RSS rises and
# falls within every step (activations, gradients), so a single sample per minute says more about
# where in the step it fell than about growth: the summary takes each minute's peak (the highest
# sample of that minute) and compares the peaks after warm-up (the first WARMUP_MIN minutes are
# left out): their spread (max - min) in MiB and percent, and the first steady minute's peak
# against the last one's (growth). A sample misses the peaks between samples, so each sample also
# reads VmHWM, the peak RSS since the last sample (the peak is reset after each read by writing 5
# to /proc/PID/clear_refs): a minute's peak is then the true highest RSS of every step in it, not
# the highest of 12 instants (falls back to VmRSS where the reset is not allowed). At the end it stops the run with SIGTERM (a preemption:
# checkpoint, exit 4) and prints the data rank's bound: train.credits (and the read-ahead) x the
# plan's largest batch x the model ranks it feeds.
#
#   bench/soak/soak.sh [BUILD_DIR] [MINUTES] [-- extra sluice train options]
#
# A benchmark, not a test: it runs niced (nice 10) and never fails on a number; it writes
# WORK/rss.tsv (seconds, rank, role, VmRSS KiB) and WORK/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
minutes=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
sluice=$(realpath "$build/launcher/sluice")
work=${BENCH_DIR:-/tmp/sluice-soak}
sample_s=${SAMPLE_S:-5}
warmup_min=${WARMUP_MIN:-5}
ranks=3
. bench/train/sample_cache.sh
sample_cache "$work" "$sluice" "$ranks"
rm -rf "$work/run" "$work/rss.tsv"

# Steps far beyond the time limit: the run ends by SIGTERM, as a preempted job does.
nice -n 10 $launcher "$sluice" train --cache "$work/cache" --run-dir "$work/run" --steps 100000000 \
  --set train.batch_size=8 --set train.n_buckets=2 --set train.log_every=500 \
  --set train.validation_every=2000 --set train.checkpoint_every=2000 "$@" >"$work/train.log" 2>&1 &
launcher_pid=$!

# The ranks are the sluice processes under this mpirun; OMPI_COMM_WORLD_RANK names each.
rank_pids() {
  for pid in $(pgrep -P "$launcher_pid" 2>/dev/null; pgrep -x sluice 2>/dev/null); do
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

/usr/bin/python3 - "$work" "$warmup_min" <<'PY' | tee "$work/summary.txt"
import collections, glob, json, re, sys
work, warmup_min = sys.argv[1], float(sys.argv[2])
rows = [line.split('\t') for line in open(f"{work}/rss.tsv").read().splitlines()[1:]]
by_rank = collections.defaultdict(list)
# (seconds, rss, peak since the previous sample)
for seconds, rank, kib, peak in rows:
    by_rank[int(rank)].append((int(seconds), int(kib), int(peak)))
log = open(f"{work}/train.log").read()
steps = re.findall(r"step (\d+)/\d+", log)
print(f"{len(rows)} samples, last logged step {steps[-1] if steps else '?'}, warm-up {warmup_min:g} min left out")
# The data rank's bound: credits x the largest padded batch (B x (F x n_mels x 4 + T x 4 + 16)).
config = open(f"{work}/run/sluice-train.yaml").read()
credits = int(re.search(r"credits:\s*(\d+)", config).group(1))
n_mels = json.load(open(f"{work}/cache/manifest.json"))["settings"]["features"]["n_mels"]
largest = 0
for F, T, B in re.findall(r"^\s*\d+\s+\d+\.\.(\d+)\s+(\d+)\s+(\d+)\s", log, re.M):
    largest = max(largest, int(B) * (int(F) * n_mels * 4 + int(T) * 4 + 16))
# Roles from the role plan rank 0 prints: "  0     vm    cpu   data   feeds 1,2".
roles = {int(r): role for r, role in re.findall(r"^\s+(\d+)\s+\S+\s+\S+\s+(data|model|data\+model)\s", log, re.M)}
print(f"{'rank':<5}{'role':<7}{'minutes':>8}{'peak min':>10}{'peak max':>10}{'spread MiB':>11}{'spread':>8}"
      f"{'first->last MiB':>17}{'trough min':>11}")
for rank in sorted(by_rank):
    per_minute = collections.defaultdict(list)
    for seconds, kib, peak in by_rank[rank]:
        if seconds >= warmup_min * 60:
            per_minute[seconds // 60].append((kib, peak))
    if not per_minute:
        print(f"{rank:<5} no samples after the warm-up"); continue
    minutes = sorted(per_minute)
    peaks = [max(peak for _, peak in per_minute[m]) for m in minutes]
    troughs = [min(kib for kib, _ in per_minute[m]) for m in minutes]
    lo, hi = min(peaks), max(peaks)
    print(f"{rank:<5}{roles.get(rank, '?'):<7}{len(minutes):>8}{lo / 1024:>10.1f}{hi / 1024:>10.1f}"
          f"{(hi - lo) / 1024:>11.1f}{100.0 * (hi - lo) / lo:>7.1f}%"
          f"{(peaks[-1] - peaks[0]) / 1024:>+17.1f}{min(troughs) / 1024:>11.1f}")
read_ahead = int(re.search(r"read_ahead:\s*(\d+)", config).group(1))
print(f"data rank's batches in flight: credits {credits} x largest batch {largest / 1024:.0f} KiB x 2 model ranks "
      f"= {credits * largest * 2 / 2**20:.1f} MiB; with the read-ahead ({read_ahead} more per model rank) "
      f"{(credits + read_ahead) * largest * 2 / 2**20:.1f} MiB")
PY
