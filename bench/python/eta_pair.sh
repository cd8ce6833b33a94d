#!/usr/bin/env bash
# bench/python/eta.py for two builds in one session, interleaved (baseline, this build, baseline,
# ...), so that both see the same machine: the Python rank's η and samples/s beside the best
# DataLoader's, and what the sluice data rank costs while it feeds (CPU seconds per fed batch,
# cores during the feed and while it only waits for the Python rank's end) with, when perf is
# installed, its context switches, sched_yield and clock_nanosleep calls per fed batch.
#
#   BASELINE=OTHER_BUILD bench/python/eta_pair.sh [BUILD_DIR] [ROUNDS] [STEPS] [WORKERS] [-- sluice train options]
#
# OTHER_BUILD: another build directory (its launcher/sluice and python/, e.g. main's build); without
# it only BUILD_DIR runs. Each run: 1 data rank + 1 Python rank (Debian's /usr/bin/python3 with
# the build's extension), batch 16, 2 buckets, STEPS (120) global steps on the sample corpus's
# cache, DataLoader workers WORKERS (0,1,2). Prints one line per run and writes every run's JSON
# to $BENCH_DIR (default /tmp/sluice-bench-eta). PY_MALLOC=system|tcmalloc: the Python rank's C
# allocator (default system, the interpreter's glibc; tcmalloc preloads Debian's
# libtcmalloc-minimal4 into it: docs/python.md, "Allocator"); the sluice rank runs with tcmalloc
# either way (SLUICE_MALLOC). PYTHON: the Python rank's interpreter (default /usr/bin/python3; on
# the GPU machine `python3`, the one with CUDA torch). `-- --set model.device=cuda` runs the Python
# rank on GPU 0, fed over cuda_ipc (scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-2}
steps=${3:-120}
workers=${4:-0,1,2}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
python=${PYTHON:-/usr/bin/python3}
work=${BENCH_DIR:-/tmp/sluice-bench-eta}
. bench/train/sample_cache.sh
sample_cache "$work" "$build/launcher/sluice" 2
py_env=()
case "${PY_MALLOC:-system}" in
  system) ;;
  tcmalloc) py_env=(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4) ;;
  *) echo "eta_pair.sh: PY_MALLOC must be system or tcmalloc, not $PY_MALLOC" >&2; exit 2 ;;
esac
builds=("$build")
[ -n "${BASELINE:-}" ] && builds=("$BASELINE" "$build")

# perf stat of the data rank (the `sluice` process whose command line names RUN_DIR) until it exits.
watch_data_rank() {
  local run_dir=$1 out=$2 pid=""
  command -v perf >/dev/null || return 0
  for _ in $(seq 1200); do
    for p in $(pgrep -f -- "--run-dir $run_dir" || true); do
      [ "$(basename "$(tr '\0' '\n' < "/proc/$p/cmdline" | head -1)")" = sluice ] && pid=$p
    done
    [ -n "$pid" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || return 0
  perf stat -x, -e task-clock,context-switches,syscalls:sys_enter_sched_yield,syscalls:sys_enter_clock_nanosleep \
    -p "$pid" -o "$out" >/dev/null 2>&1 || true
}

for round in $(seq "$rounds"); do
  for b in "${builds[@]}"; do
    name=$(basename "$(cd "$b/.." && pwd)")-$(basename "$b")-$round
    run_dir=$work/run-$name
    rm -rf "$run_dir"
    load=$(cut -d' ' -f1 /proc/loadavg)
    watch_data_rank "$run_dir" "$work/perf-$name.csv" &
    watcher=$!
    PYTHONPATH=$b/python mpirun --bind-to none -np 1 "$b/launcher/sluice" train --cache "$work/cache" \
      --run-dir "$run_dir" --steps "$steps" --set train.batch_size=16 --set train.n_buckets=2 \
      --set train.validation_every=0 --set train.checkpoint_every=0 --set runtime.status_every_s=0 "$@" \
      : -np 1 env "${py_env[@]}" "$python" bench/python/eta.py --cache "$work/cache" --workers "$workers" \
      >"$work/eta-$name.log" 2>&1
    wait "$watcher" || true
    /usr/bin/python3 - "$work/eta-$name.log" "$work/perf-$name.csv" "$b" "$load" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, os, sys
log, perf, build, load0, load1 = sys.argv[1:]
text = open(log).read()
r = json.loads(text[text.index("{\n"):text.rindex("}") + 1])
cpu = r["data_rank_cpu"]
feed = cpu.get("feed", {})
after = [cpu[k] for k in ("replay_own_pass", "dataloader_passes") if k in cpu]
after_cores = sum(p["cpu_s"] for p in after) / max(sum(p["wall_s"] for p in after), 1e-9)
best = max(r["dataloader"].values(), key=lambda l: l["samples_per_s"])
counts = {}
if os.path.exists(perf):
    for line in open(perf):
        f = line.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            counts[f[2].split(":")[-1]] = float(f[0])
batches = r["steps"]
per = lambda k: f"{counts[k] / batches:.0f}" if k in counts else "-"
print(f"{build:<28} load {load0}->{load1}  fed {r['fed_samples_per_s']:.1f}/s  eta {r['eta_interleaved']:.3f}  "
      f"best DataLoader {best['samples_per_s']:.1f}/s (eta {r['dataloader_eta_interleaved']:.3f})  "
      f"sluice/DataLoader samples/s {r['sluice_over_best_dataloader_samples_per_s']:.2f}  "
      f"data rank: {feed.get('cpu_s_per_batch', float('nan')) * 1e3:.1f} ms CPU/batch, {feed.get('cores', float('nan')):.3f} "
      f"cores fed, {after_cores:.3f} cores after close; per batch over its life: switches {per('context-switches')}, "
      f"yields {per('sys_enter_sched_yield')}, sleeps {per('sys_enter_clock_nanosleep')}", flush=True)
PY
  done
done
