#!/usr/bin/env bash
# The prep-speed measurements of docs/performance.md ("Prep speed work 2"), in one go, for a quiet
# machine: every number beside BASELINE_BUILD's, measured interleaved in the same run.
#
#   bench/prep/quiet_run.sh BASELINE_BUILD [BUILD] [LOG]      (e.g. a build of main, then build/)
#
#   1. start-up and exit: `sluice --version`, a one-row prep        (bench_startup.sh, 10 rounds)
#   2. WAV, 170 copies (20,400 clips, 23.8 h: LJSpeech's size)       (bench_prep_vs_mel.sh, 3 rounds)
#   3. FLAC, 60 copies (8.4 h)                                        (bench_prep_vs_mel.sh, 2 rounds)
#   4. MP3, 10 copies (1.4 h), this build only                        (bench_prep_vs_mel.sh, 1 round)
#   5. FLAC and MP3 decoding alone: libsndfile, libFLAC, libmpg123, and libavcodec when the build
#      found libavcodec-dev and libavformat-dev (bench_decode)
#   6. this build's CPU profile by thread and stage, 1 rank and 2 ranks, WAV (profile_prep.sh;
#      needs perf, run as root)
# About 15 minutes on 2 quiet cores. Everything goes to LOG (default /tmp/sluice-prep-quiet-run.log)
# and to the terminal; the load average is printed before each part.
set -euo pipefail
cd "$(dirname "$0")/../.."
baseline=${1:?usage: bench/prep/quiet_run.sh BASELINE_BUILD [BUILD] [LOG]}
build=${2:-build}
log=${3:-/tmp/sluice-prep-quiet-run.log}
exec > >(tee "$log") 2>&1
part() { echo; echo "### $* ($(date -Is); load average $(cut -d' ' -f1-3 /proc/loadavg))"; }
part "1. start-up and exit"
BASELINE=$baseline ROUNDS=10 bench/prep/bench_startup.sh "$build"
part "2. WAV x 170"
BENCH_DIR=/tmp/sluice-bench-wav170 BASELINE=$baseline ROUNDS=3 bench/prep/bench_prep_vs_mel.sh "$build" 170 wav
part "3. FLAC x 60"
BENCH_DIR=/tmp/sluice-bench-flac60 BASELINE=$baseline ROUNDS=2 bench/prep/bench_prep_vs_mel.sh "$build" 60 flac
part "4. MP3 x 10"
BENCH_DIR=/tmp/sluice-bench-mp3 bench/prep/bench_prep_vs_mel.sh "$build" 10 mp3
part "5. decoding alone"
"$build/bench/dataset/bench_decode" /tmp/sluice-bench-flac60/clips 5
"$build/bench/dataset/bench_decode" /tmp/sluice-bench-mp3/clips 5
if command -v perf >/dev/null; then
  part "6. CPU profile, 1 rank"
  BENCH_DIR=/tmp/sluice-bench-wav170 bench/prep/profile_prep.sh "$build" 1
  part "6. CPU profile, 2 ranks (perf unwinds fewer stacks under mpirun: see the 'not unwound' line)"
  BENCH_DIR=/tmp/sluice-bench-wav170 bench/prep/profile_prep.sh "$build" 2
else
  part "6. skipped: no perf (Debian: apt-get install linux-perf)"
fi
part "done"
