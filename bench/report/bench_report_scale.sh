#!/usr/bin/env bash
# `sluice report` time and peak RSS against the rank count (docs/performance.md, "The report at
# cluster scale"). Not a test: it prints a table and asserts nothing.
#
#   bench/report/bench_report_scale.sh [BUILD_DIR] [RANKS...]        (default: build 256 1024 4096)
#   TEMPLATE=RUN_DIR  clone a real run's timelines (a 3-rank quick start) instead of the synthetic one
#   STEPS=300         steps of the synthetic template
#   WORK=/tmp/...     where the run directories go (about 150 KB per rank; removed at the end)
set -euo pipefail
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(256 1024 4096)
work=${WORK:-$(mktemp -d /tmp/sluice-bench-report.XXXXXX)}
from=()
[ -n "${TEMPLATE:-}" ] && from=(--from "$TEMPLATE")
printf '%6s %10s %10s %12s %12s %12s %s\n' ranks timeline_MB report_s peak_RSS_MB trace_MB per_rank_ms planted
for n in "${ranks[@]}"; do
  dir="$work/run-$n"
  rm -rf "$dir"
  planted=$("$build/bench/report/make_synthetic_run" --ranks "$n" --out "$dir" --steps "${STEPS:-300}" "${from[@]}")
  size=$(du -sm "$dir/timeline" | cut -f1)
  /usr/bin/time -f '%e %M' -o "$work/time-$n" "$build/launcher/sluice" report "$dir" > "$work/report-$n.txt"
  read -r seconds kb < "$work/time-$n"
  trace=$(( $(stat -c %s "$dir/trace.json") / 1000000 ))
  named=$(grep -c '^straggler' "$work/report-$n.txt" || true)
  printf '%6s %10s %10s %12s %12s %12s %s (%s straggler verdicts)\n' "$n" "$size" "$seconds" $((kb / 1024)) "$trace" \
    "$(awk -v s="$seconds" -v n="$n" 'BEGIN { printf "%.1f", 1000 * s / n }')" "$planted" "$named"
  rm -rf "$dir"
done
[ -n "${WORK:-}" ] || rm -rf "$work"
