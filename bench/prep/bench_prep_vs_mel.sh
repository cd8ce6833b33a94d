#!/usr/bin/env bash
# Prep speed against its limit: `sluice prep`'s audio-seconds per wall second per core beside the
# mel math alone on one core (window, FFT, power, filterbank, log on the same decoded frames: no
# decode, no resample, no I/O; `sluice bench mel`'s "mel only"), measured in the same run, on the
# same clips, stored as FORMAT. Then where prep's time went, from the prep report's own stage
# timing (prep-report.json: thread-seconds per stage, summed over ranks).
#
#   bench/prep/bench_prep_vs_mel.sh [BUILD_DIR] [COPIES] [FORMAT] [RANKS]
#
# PREP_ARGS="--set cache.mel_dtype=float16" passes more arguments to the prep.
# SHARD_SIZE=N sets cache.shard_size (default: the config's default, 256 rows; this script used 64
# until 2026-11-27, which made 4x the shards and their per-shard costs).
#
# FORMAT: wav (the sample corpus's 16-bit WAV, default), flac (sox), mp3 (written with
# libsndfile's MPEG encoder by a small C program compiled here, as Debian's sox has no MP3 writer).
# The corpus is the sample corpus listed COPIES times (default 60: 7,200 clips, 8.4 h) as an
# LJSpeech folder whose wavs/ holds links to the clips; every file is read once first so both
# sides read from the page cache. RANKS (default 2) ranks x THREADS worker threads (default 1),
# `--bind-to none`; "per core" divides by min(RANKS x THREADS, nproc). Numbers only: nothing is
# asserted. THREADS=2 with RANKS=1 is one node's other way to use two cores: one rank, one writer,
# one MPI start instead of two.
#
# THE LIMIT. Prep's per-clip work is decode (load_audio: read, decode, resample) then the mel; on
# one core it cannot beat the two done alone, one after the other, on the same files: limit =
# 1 / (1 / decode-alone + 1 / mel-alone), both from `sluice bench mel` in the same run (decode alone
# on the files as prep reads them, mel alone on their decoded samples). "prep per core, of the
# limit" is prep's rate per core over that: what is left for prep itself to win (text, writing,
# start-up, idle), where the ratio to the mel alone also counts the decoder's own cost.
#
# Beside the mel alone on one core (the goal's reference) it measures the mel alone on
# min(RANKS, nproc) cores at once (the ceiling of "prep per core": what the cores give when each
# runs nothing but the mel), and the mel's CPU-second rate, the reference of the CPU-second ratio.
# The same copies also time decode alone, so the limit is given a second time as the cores give it
# when every one of them runs decode and mel ("the limit, every core at once"): on a machine whose
# cores slow each other down (shared caches and memory, vCPUs on one physical core, other load)
# that is the per-core limit a prep of RANKS ranks can reach, and the one-core limit is above it.
#
# Each round is also read against its own measurements (the limit measured just before its prep):
# the machine's speed moves between rounds (the mel alone at 5,000-10,000 audio-s per CPU-second
# within minutes on CPU-2c), which the best-of-session summary counts against prep.
#
# BASELINE=OTHER_BUILD_DIR (e.g. a build of main) also runs that build's prep, interleaved with
# this one's ROUNDS times (default 1 without a baseline, 3 with one): baseline, candidate,
# baseline, ... each beside a fresh mel-alone measurement, so both see the same load. The corpus
# is made once per BENCH_DIR, FORMAT and COPIES and reused by later runs (REMAKE=1 remakes it).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
copies=${2:-60}
format=${3:-wav}
ranks=${4:-2}
threads=${THREADS:-1}
sluice=$(realpath "$build/launcher/sluice")
work=${BENCH_DIR:-/tmp/sluice-bench-prep-vs-mel}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# SAMPLE_CORPUS: an existing sample corpus (e.g. build/sample-corpus) instead of data/sample-corpus.
source_corpus=${SAMPLE_CORPUS:-data/sample-corpus}
scripts/make-sample-corpus.sh "$source_corpus" >/dev/null
source_corpus=$(realpath "$source_corpus")
stamp="$format x $copies from $source_corpus"
if [ "${REMAKE:-0}" = 1 ] || [ "$(cat "$work/corpus.stamp" 2>/dev/null)" != "$stamp" ]; then
rm -rf "$work" && mkdir -p "$work/clips" "$work/corpus/wavs"

case "$format" in
  wav) for f in "$source_corpus"/wavs/*.wav; do ln -s "$f" "$work/clips/"; done ;;
  flac) for f in "$source_corpus"/wavs/*.wav; do sox "$f" "$work/clips/$(basename "${f%.wav}").flac"; done ;;
  mp3)
    cat >"$work/to_mp3.c" <<'C'
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {  /* to_mp3 IN.wav OUT.mp3 */
  SF_INFO in_info = {0};
  SNDFILE* in = sf_open(argv[1], SFM_READ, &in_info);
  if (!in) { fprintf(stderr, "%s: %s\n", argv[1], sf_strerror(NULL)); return 1; }
  float* samples = malloc(sizeof(float) * in_info.frames * in_info.channels);
  sf_count_t n = sf_readf_float(in, samples, in_info.frames);
  SF_INFO out_info = {0};
  out_info.samplerate = in_info.samplerate;
  out_info.channels = in_info.channels;
  out_info.format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
  SNDFILE* out = sf_open(argv[2], SFM_WRITE, &out_info);
  if (!out) { fprintf(stderr, "%s: %s\n", argv[2], sf_strerror(NULL)); return 1; }
  sf_writef_float(out, samples, n);
  sf_close(out);
  sf_close(in);
  return 0;
}
C
    cc -O2 "$work/to_mp3.c" -o "$work/to_mp3" -lsndfile
    for f in "$source_corpus"/wavs/*.wav; do "$work/to_mp3" "$f" "$work/clips/$(basename "${f%.wav}").mp3"; done ;;
  *) echo "FORMAT must be wav, flac or mp3" >&2; exit 2 ;;
esac

# COPIES x the metadata rows under distinct ids, each linked to its clip (in Python: one process,
# not one `ln` per row, which took minutes on a loaded machine).
/usr/bin/python3 - "$source_corpus/metadata.csv" "$work" "$format" "$copies" <<'PY'
import os, sys
metadata, work, fmt, copies = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [line.rstrip("\n").split("|", 2) for line in open(metadata, encoding="utf-8") if line.strip()]
with open(f"{work}/corpus/metadata.csv", "w", encoding="utf-8") as out:
    for copy in range(copies):
        for id_, text, normalized in rows:
            os.symlink(f"{work}/clips/{id_}.{fmt}", f"{work}/corpus/wavs/{id_}-{copy}.{fmt}")
            out.write(f"{id_}-{copy}|{text}|{normalized}\n")
PY
echo "$stamp" >"$work/corpus.stamp"
fi
cat "$work"/clips/* "$source_corpus"/wavs/* >/dev/null  # page cache, for both sides

# One measurement of BUILD's prep ($2) beside the mel math alone, one thread, on the decoded frames
# of the same clips (repeat = COPIES passes), measured with this build's binary just before and
# just after it.
measure() {
local label=$1 prep_sluice
prep_sluice=$(realpath "$2/launcher/sluice")
rm -rf "$work/cache"
# The mel alone and decode alone on one core, measured just before the prep and again just after
# it; the two are averaged (the machine's speed moves within minutes: a limit measured at one
# moment and a prep run at another differed by up to 1.7x). The mel's CPU-second rate is its
# thread's CPU time, the reference of the CPU-second ratio, as prep's side is its CPU time too, so
# that neither counts waiting for a core on a loaded machine. Decode alone: 0 from a build without it.
one_core_rates() {
  "$sluice" bench mel --no-baseline --repeat "$copies" "$work/clips" | tail -1 | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["sluice_mel_only_audio_s_per_s"], d.get("sluice_mel_only_audio_s_per_cpu_s", d["sluice_mel_only_audio_s_per_s"]),
      d.get("sluice_decode_only_audio_s_per_s", 0), d.get("sluice_decode_only_audio_s_per_cpu_s", 0))'
}
before=$(one_core_rates)
# The mel alone on min(RANKS, cores) cores at once, each copy on the same clips: the rate per core
# that the mel math itself keeps when every core runs it, as prep's ranks do. Below the one-core
# rate when the cores share caches, memory bandwidth or a physical core (a VM's vCPUs may be
# hyperthreads of one core): the ceiling of "prep per core" that no change to prep can lift.
parallel=$(/usr/bin/python3 -c "import os; print(min($ranks * $threads, os.cpu_count()))")
for ((copy = 0; copy < parallel; copy++)); do
  "$sluice" bench mel --no-baseline --repeat "$copies" "$work/clips" | tail -1 >"$work/mel-parallel-$copy.json" &
done
wait
parallel_mean() {  # the mean over the copies of one field of their JSON lines (0 when absent)
  cat "$work"/mel-parallel-*.json | /usr/bin/python3 -c 'import json,sys; r=[json.loads(l).get(sys.argv[1], 0) for l in sys.stdin if l.strip()]; print(sum(r)/len(r))' "$1"
}
mel_parallel_rate=$(parallel_mean sluice_mel_only_audio_s_per_s)
mel_parallel_cpu_rate=$(parallel_mean sluice_mel_only_audio_s_per_cpu_s)
decode_parallel_rate=$(parallel_mean sluice_decode_only_audio_s_per_s)
decode_parallel_cpu_rate=$(parallel_mean sluice_decode_only_audio_s_per_cpu_s)
rm -f "$work"/mel-parallel-*.json

# Under mpirun for one rank too: run alone, an Open MPI singleton forks an `orted` that it does
# not wait for, so `time` would not count its CPU.
launcher="mpirun --bind-to none -np $ranks"
# The job's CPU time (user + system of every rank: mpirun waits for them) beside its wall time:
# on a loaded machine wall time also counts waiting for a core.
start=$(date +%s.%N)
cpu=$( { TIMEFORMAT='%U %S'; time $launcher "$prep_sluice" prep --corpus "$work/corpus" --out "$work/cache" --threads "$threads" \
  ${SHARD_SIZE:+--set cache.shard_size=$SHARD_SIZE} ${PREP_ARGS:-} >"$work/prep-log.txt" 2>&1; } 2>&1 )
end=$(date +%s.%N)
after=$(one_core_rates)
read -r mel_rate mel_cpu_rate decode_rate decode_cpu_rate < <(/usr/bin/python3 -c '
import sys
b, a = [list(map(float, x.split())) for x in sys.argv[1:3]]
print(*[(x + y) / 2 for x, y in zip(b, a)])' "$before" "$after")
echo "one core, before / after the prep (mel, mel per CPU-s, decode, decode per CPU-s): $before / $after"

/usr/bin/python3 - "$work/cache" "$mel_rate" "$mel_cpu_rate" "$mel_parallel_rate" "$decode_rate" "$decode_cpu_rate" \
  "$mel_parallel_cpu_rate" "$decode_parallel_rate" "$decode_parallel_cpu_rate" "$start" "$end" "$ranks" "$threads" "$format" "$copies" "$label" $cpu <<'PY'
import json, os, sys
(cache, mel, mel_cpu, mel_parallel, decode, decode_cpu, mel_parallel_cpu, decode_parallel, decode_parallel_cpu, start, end,
 ranks, threads, fmt, copies, label, user, system) = sys.argv[1:]
mel_parallel_cpu, decode_parallel, decode_parallel_cpu = float(mel_parallel_cpu), float(decode_parallel), float(decode_parallel_cpu)
mel, mel_cpu, mel_parallel, wall, ranks = float(mel), float(mel_cpu), float(mel_parallel), float(end) - float(start), int(ranks)
decode, decode_cpu = float(decode), float(decode_cpu)
# The limit: decode alone then mel alone, on one core (see the top of this script); 0 when unknown.
limit = 1 / (1 / decode + 1 / mel) if decode > 0 else 0.0
limit_cpu = 1 / (1 / decode_cpu + 1 / mel_cpu) if decode_cpu > 0 else 0.0
# The same with every core running decode and mel at once (per core; per CPU-second of each).
limit_all = 1 / (1 / decode_parallel + 1 / float(mel_parallel)) if decode_parallel > 0 else 0.0
limit_all_cpu = 1 / (1 / decode_parallel_cpu + 1 / mel_parallel_cpu) if decode_parallel_cpu > 0 and mel_parallel_cpu > 0 else 0.0
cpu_seconds = float(user) + float(system)
threads = int(threads)
cores = min(ranks * threads, os.cpu_count())
manifest = json.load(open(f"{cache}/manifest.json"))
report = json.load(open(f"{cache}/prep-report.json"))
audio = manifest["totals"]["seconds"]
per_core = audio / wall / cores
print(f"== {label}: wall {wall:.1f} s, CPU {cpu_seconds:.1f} s (user {float(user):.1f} + sys {float(system):.1f})")
print(f"corpus: sample corpus x {copies} as {fmt}, {manifest['totals']['samples']} clips, {audio / 3600:.2f} h; "
      f"{ranks} rank(s) x {threads} worker(s) on {os.cpu_count()} core(s); load average {os.getloadavg()[0]:.1f}")
print(f"{'':<44}{'audio-s/s':>12}")
print(f"{'mel math alone, 1 core':<44}{mel:>12.0f}")
print(f"{'mel math alone, per CPU-second':<44}{mel_cpu:>12.0f}")
print(f"{f'mel math alone, {cores} at once, per core':<44}{mel_parallel:>12.0f}  ({mel_parallel / mel:.2f}x one core: the ceiling)")
print(f"{'sluice prep, per core (whole job wall)':<44}{per_core:>12.0f}")
print(f"{'sluice prep, per CPU-second (user + sys)':<44}{audio / cpu_seconds:>12.0f}")
if limit > 0:
    print(f"{'decode alone (load_audio), 1 core':<44}{decode:>12.0f}")
    print(f"{'the limit: decode alone + mel alone, 1 core':<44}{limit:>12.0f}  (per CPU-second: {limit_cpu:.0f})")
if limit_all > 0:
    print(f"{f'the limit, {cores} cores at once, per core':<44}{limit_all:>12.0f}  (per CPU-second: {limit_all_cpu:.0f})")
print(f"ratio prep per core / mel alone: {per_core / mel:.2f}  (goal: >= 0.7 WAV, >= 0.5 FLAC/MP3)")
print(f"ratio prep per CPU-second / mel alone per CPU-second: {audio / cpu_seconds / mel_cpu:.2f}  (less sensitive to other load)")
if limit > 0:
    print(f"prep per core, of the limit: {per_core / limit:.2f}; per CPU-second, of the limit per CPU-second: "
          f"{audio / cpu_seconds / limit_cpu:.2f}")
if limit_all > 0:
    print(f"prep per core, of the limit with every core at once: {per_core / limit_all:.2f}; per CPU-second: "
          f"{audio / cpu_seconds / limit_all_cpu:.2f}")
stages = {}
for rank in report["ranks"]:
    for name, seconds in rank["stages"].items():
        stages[name] = stages.get(name, 0.0) + seconds
# The builder threads' own CPU time (a build from before 2026-12-05 does not report it): the
# workers' (decode, text, mel) against the whole job's, both from the same run, so the machine's
# speed of the moment is in both. What is not the workers' is prep's own cost around them.
workers_cpu = sum(rank.get("cpu_seconds", {}).get("workers", 0.0) for rank in report["ranks"])
writer_cpu = sum(rank.get("cpu_seconds", {}).get("writer", 0.0) for rank in report["ranks"])
if workers_cpu > 0:
    print(f"CPU by thread: workers {workers_cpu:.2f} s ({100 * workers_cpu / cpu_seconds:.0f}% of the job's), writers "
          f"{writer_cpu:.2f} s ({100 * writer_cpu / cpu_seconds:.0f}%), the rest (main threads, intake, mpirun) "
          f"{cpu_seconds - workers_cpu - writer_cpu:.2f} s ({100 * (cpu_seconds - workers_cpu - writer_cpu) / cpu_seconds:.0f}%); "
          f"the workers took {workers_cpu / (audio / limit_cpu):.2f}x the limit's CPU (decode + mel alone)" if limit_cpu > 0 else "")
cpu = wall * cores
print(f"where the {cpu:.1f} core-seconds went (prep report stages, thread-seconds summed over ranks):")
for name in ["decode", "text", "features", "write"]:
    s = stages.get(name, 0.0)
    print(f"  {name:<10}{s:>9.2f} s  {100 * s / cpu:5.1f}% of core-seconds  {s / stages['features']:5.2f}x features")
rest = cpu - sum(stages.values())
print(f"  {'rest':<10}{rest:>9.2f} s  {100 * rest / cpu:5.1f}%  (start-up, listing, header probe, MPI, index, manifest, idle)")
print(f"features stage vs mel alone: {audio / stages['features']:.0f} audio-s per feature-second "
      f"({audio / stages['features'] / mel:.2f}x the mel-alone rate)")
with open(os.path.join(os.path.dirname(cache), "results.jsonl"), "a") as out:
    out.write(json.dumps({"label": label.split(" (")[0], "mel": mel, "mel_cpu": mel_cpu, "mel_parallel": mel_parallel,
                          "decode": decode, "decode_cpu": decode_cpu, "limit": limit, "limit_cpu": limit_cpu, "wall": wall,
                          "limit_all": limit_all, "limit_all_cpu": limit_all_cpu, "workers_cpu": workers_cpu, "writer_cpu": writer_cpu,
                          "cpu": cpu_seconds, "user": float(user), "system": float(system), "audio": audio,
                          "cores": cores, "load": os.getloadavg()[0], "stages": stages}) + "\n")
PY
}

rm -f "$work/results.jsonl"
if [ -n "${BASELINE:-}" ]; then
  for ((round = 0; round < ${ROUNDS:-3}; round++)); do
    measure "baseline $BASELINE (round $((round + 1)))" "$BASELINE"
    measure "candidate $build (round $((round + 1)))" "$build"
  done
else
  for ((round = 0; round < ${ROUNDS:-1}; round++)); do measure "$build" "$build"; done
fi

# Summary over the rounds: medians of wall and CPU time per build, and the ratios against the
# fastest mel-alone measurement of the session (the least disturbed by other load: the limit).
/usr/bin/python3 - "$work/results.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
mel = max(run["mel"] for run in runs)
mel_cpu = max(run.get("mel_cpu", run["mel"]) for run in runs)
mel_parallel = max(run.get("mel_parallel", 0.0) for run in runs)
print(f"\nsummary: {len(runs)} run(s); mel math alone, best of the session: {mel:.0f} audio-s/s, "
      f"{mel_cpu:.0f} audio-s per CPU-second, {mel_parallel:.0f} per core with every core running it "
      f"({mel_parallel / mel:.2f}x: the ceiling of ratio wall); load average {min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}")
# The limit (decode alone + mel alone, one core) from the same best-of-session measurements.
limit = max(run.get("limit", 0.0) for run in runs)
limit_cpu = max(run.get("limit_cpu", 0.0) for run in runs)
if limit > 0:
    decode = max(run.get("decode", 0.0) for run in runs)
    print(f"decode alone, best of the session: {decode:.0f} audio-s/s; the limit (decode alone + mel alone, one "
          f"core): {limit:.0f} audio-s/s, {limit_cpu:.0f} per CPU-second")
limit_all = max(run.get("limit_all", 0.0) for run in runs)
limit_all_cpu = max(run.get("limit_all_cpu", 0.0) for run in runs)
if limit_all > 0:
    print(f"the limit with every core at once, best of the session: {limit_all:.0f} audio-s/s per core, "
          f"{limit_all_cpu:.0f} per CPU-second")
print("each round against the limits measured just before it (of the limit: one core; all: every core at once):")
for run in runs:
    if run.get("limit", 0) <= 0:
        continue
    per_core, per_cpu = run["audio"] / run["wall"] / run["cores"], run["audio"] / run["cpu"]
    line = f"  {run['label']:<38} of the limit {per_core / run['limit']:.2f} wall, {per_cpu / run['limit_cpu']:.2f} CPU"
    if run.get("limit_all", 0) > 0:
        line += f"; all {per_core / run['limit_all']:.2f} wall, {per_cpu / run['limit_all_cpu']:.2f} CPU"
    if run.get("workers_cpu", 0) > 0:
        line += (f"; workers {100 * run['workers_cpu'] / run['cpu']:.0f}% of the CPU, at "
                 f"{run['audio'] / run['limit_cpu'] / run['workers_cpu']:.2f}x the limit's speed")
    print(line)
for label in dict.fromkeys(run["label"] for run in runs):
    mine = [run for run in runs if run["label"] == label and run.get("limit", 0) > 0]
    if not mine:
        continue
    of = lambda key, per: statistics.median(per(r) / r[key] for r in mine if r.get(key, 0) > 0) if any(r.get(key, 0) > 0 for r in mine) else float("nan")
    wall_rate = lambda r: r["audio"] / r["wall"] / r["cores"]
    cpu_rate = lambda r: r["audio"] / r["cpu"]
    print(f"  {label:<38} medians: of the limit {of('limit', wall_rate):.2f} wall, {of('limit_cpu', cpu_rate):.2f} CPU; "
          f"all {of('limit_all', wall_rate):.2f} wall, {of('limit_all_cpu', cpu_rate):.2f} CPU"
          + (f"; workers {100 * statistics.median(r['workers_cpu'] / r['cpu'] for r in mine):.0f}% of the CPU"
             if all(r.get("workers_cpu", 0) > 0 for r in mine) else ""))
print(f"{'build':<40}{'wall s':>8}{'CPU s':>8}{'sys s':>7}{'ratio wall':>12}{'ratio CPU':>11}{'of limit':>10}{'CPU':>6}   (medians)")
for label in dict.fromkeys(run["label"] for run in runs):
    mine = [run for run in runs if run["label"] == label]
    wall = statistics.median(r["wall"] for r in mine)
    cpu = statistics.median(r["cpu"] for r in mine)
    system = statistics.median(r.get("system", 0.0) for r in mine)
    audio, cores = mine[0]["audio"], mine[0]["cores"]
    of_limit = f"{audio / wall / cores / limit:>10.2f}{audio / cpu / limit_cpu:>6.2f}" if limit > 0 else f"{'-':>10}{'-':>6}"
    print(f"{label:<40}{wall:>8.1f}{cpu:>8.1f}{system:>7.1f}{audio / wall / cores / mel:>12.2f}{audio / cpu / mel_cpu:>11.2f}{of_limit}")
PY
