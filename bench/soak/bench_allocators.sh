#!/usr/bin/env bash
# The C allocator against a CPU model rank's step time and peak memory: bench_train_step (the
# built-in model's training step, one process) under glibc's malloc, glibc with a fixed mmap
# threshold, and Debian's jemalloc and tcmalloc (preloaded), interleaved ROUNDS times so that every
# allocator sees the same load. Prints each run's median step and peak RSS, then per allocator the
# median of its runs and its ratio to glibc's (docs/performance.md, "Memory over an hour").
# A benchmark, not a test: it asserts nothing.
#
#   bench/soak/bench_allocators.sh [BUILD_DIR] [ROUNDS] [-- bench_train_step arguments]
#   default: build 3 -- tiny 8 544 80 20 1   (the soak's model, its largest bucket, 20 steps, 1 thread)
#   ALLOCATORS="glibc mmap1m jemalloc tcmalloc"   which ones, in this order each round
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tiny 8 544 80 20 1)
lib=/usr/lib/x86_64-linux-gnu
work=$(mktemp -d /tmp/sluice-bench-alloc.XXXXXX)
trap 'rm -rf "$work"' EXIT

# One run: the environment for allocator $1, the median step (bench_train_step's "median" line)
# and the peak RSS (/usr/bin/time).
run_one() {
  local name=$1 out="$work/$1-$2"
  local env=()
  case "$name" in
    glibc) ;;
    mmap1m) env=(MALLOC_MMAP_THRESHOLD_=1048576) ;;
    jemalloc) env=(LD_PRELOAD="$lib/libjemalloc.so.2") ;;
    tcmalloc) env=(LD_PRELOAD="$lib/libtcmalloc_minimal.so.4") ;;
    *) echo "unknown allocator $name" >&2; exit 2 ;;
  esac
  env "${env[@]}" /usr/bin/time -f '%M' -o "$out.time" "$build/bench/model/bench_train_step" "${args[@]}" >"$out.log" 2>&1
  local median
  median=$(grep -oiE 'median[^0-9]*[0-9.]+' "$out.log" | tail -1 | grep -oE '[0-9.]+$')
  echo "$name $median $(( $(tail -1 "$out.time") / 1024 ))" | tee -a "$work/rows"
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); bench_train_step ${args[*]}"
echo "allocator median_step_s peak_RSS_MB"
for round in $(seq "$rounds"); do
  for name in ${ALLOCATORS:-glibc mmap1m jemalloc tcmalloc}; do run_one "$name" "$round"; done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$work/rows" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, step, rss = line.split()
    runs[name].append((float(step), int(rss)))
base = statistics.median(s for s, _ in runs["glibc"]) if "glibc" in runs else None
print("allocator  median of medians (s)  runs (s)  peak RSS (MB)  step vs glibc")
for name, values in runs.items():
    step = statistics.median(s for s, _ in values)
    ratio = f"{step / base:.2f}" if base else "-"
    print(f"{name:<10} {step:>10.3f}  {' / '.join(f'{s:.2f}' for s, _ in values)}  "
          f"{' / '.join(str(r) for _, r in values)}  {ratio}")
PY
