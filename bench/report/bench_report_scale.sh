#!/usr/bin/env bash
# `sluice report` time and peak RSS against the rank count (docs/performance.md, "The report at
# cluster scale"). Not a test: it prints a table and asserts nothing.
#
#   bench/report/bench_report_scale.sh [BUILD_DIR] [RANKS...]        (default: build 256 1024 4096)
#   TEMPLATE=RUN_DIR  clone a real run's timelines (a 3-rank quick start) instead of the synthetic one
#   STEPS=300         steps of the synthetic template
#   STRETCH=K         the template K times over in steps (make_synthetic_run --stretch: a 300-step
#                     template run as a 3,000-step one), for the report's memory against run length
#   MAKE_ARGS="..."   more make_synthetic_run options: "--straggler 1000000" plants no model straggler (a
#                     rank past the world), so that a real template's communication-bound verdict
#                     names the hosts (the case of issue 30: docs/performance.md, "The report's words at scale")
#   WORK=/tmp/...     where the run directories go (about 150 KB per rank; removed at the end)
#   BASELINE=BINARY   also time this `sluice` (another build) on the same directories, each run
#                     right after the build's own, so both see the same load (rows marked "base"),
#                     and compare the two builds' report.md, report.json, report.html and trace.json
#                     byte for byte (cmp; a line "same" or "DIFFERENT" per file)
#
# report_s is wall time; cpu_s is user + system CPU time, which moves less with the machine's
# load (the threads that read ahead add CPU time on every core but shorten the wall). md_lines is
# report.md's length; verdict_lines the lines of its verdict section and hosts_named the distinct
# hosts (node-N) it names (docs/report.md, "At scale").
set -euo pipefail
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(256 1024 4096)
work=${WORK:-$(mktemp -d /tmp/sluice-bench-report.XXXXXX)}
from=()
[ -n "${TEMPLATE:-}" ] && from=(--from "$TEMPLATE")
[ -n "${STRETCH:-}" ] && from+=(--stretch "$STRETCH")
[ -n "${MAKE_ARGS:-}" ] && read -r -a extra <<< "$MAKE_ARGS" && from+=("${extra[@]}")
printf '%6s %5s %10s %10s %8s %12s %12s %12s %12s %8s %13s %11s %s\n' ranks build timeline_MB report_s cpu_s peak_RSS_MB \
  trace_MB json_MB per_rank_ms md_lines verdict_lines hosts_named planted
# One `sluice report` on DIR, timed: prints a row of the table.
time_report() {
  local binary=$1 label=$2 n=$3 dir=$4 size=$5 planted=$6
  /usr/bin/time -f '%e %M %U %S' -o "$work/time-$n" "$binary" report "$dir" > "$work/report-$n.txt"
  read -r seconds kb user system < "$work/time-$n"
  local trace=$(( $(stat -c %s "$dir/trace.json") / 1000000 ))
  local json_mb
  json_mb=$(awk -v b="$(stat -c %s "$dir/report.json")" 'BEGIN { printf "%.1f", b / 1e6 }')
  local named
  named=$(grep -c '^straggler' "$work/report-$n.txt" || true)
  local verdict
  verdict=$(awk '/^## Verdict/ { on = 1 } /^Steady state/ { on = 0 } on' "$dir/report.md")
  printf '%6s %5s %10s %10s %8s %12s %12s %12s %12s %8s %13s %11s %s (%s straggler verdicts)\n' "$n" "$label" "$size" \
    "$seconds" "$(awk -v u="$user" -v s="$system" 'BEGIN { printf "%.1f", u + s }')" $((kb / 1024)) "$trace" "$json_mb" \
    "$(awk -v s="$seconds" -v n="$n" 'BEGIN { printf "%.1f", 1000 * s / n }')" "$(wc -l < "$dir/report.md")" \
    "$(printf '%s\n' "$verdict" | wc -l)" "$(printf '%s\n' "$verdict" | grep -o 'node-[0-9]*' | sort -u | wc -l)" \
    "$planted" "$named"
}
for n in "${ranks[@]}"; do
  dir="$work/run-$n"
  rm -rf "$dir"
  planted=$("$build/bench/report/make_synthetic_run" --ranks "$n" --out "$dir" --steps "${STEPS:-300}" "${from[@]}")
  size=$(du -sm "$dir/timeline" | cut -f1)
  time_report "$build/launcher/sluice" this "$n" "$dir" "$size" "$planted"
  if [ -n "${BASELINE:-}" ]; then
    mkdir -p "$work/this-$n"
    cp "$dir"/report.md "$dir"/report.json "$dir"/report.html "$dir"/trace.json "$work/this-$n/"
    time_report "$BASELINE" base "$n" "$dir" "$size" "$planted"
    for f in report.md report.json report.html trace.json; do
      if cmp -s "$work/this-$n/$f" "$dir/$f"; then
        echo "       $f: same as base"
      elif [ "$f" = report.json ] && /usr/bin/python3 - "$work/this-$n/$f" "$dir/$f" <<'PY'
import json, sys
# report.json gained `analysis_window` (report/run_analysis.h, LONG RUNS): the same but for it?
a, b = (json.load(open(path)) for path in sys.argv[1:3])
for j in (a, b):
    j.pop("analysis_window", None)
sys.exit(0 if a == b else 1)
PY
      then
        echo "       $f: same as base but for analysis_window"
      else
        echo "       $f: DIFFERENT from base"
      fi
    done
    rm -rf "$work/this-$n"
  fi
  rm -rf "$dir"
done
[ -n "${WORK:-}" ] || rm -rf "$work"
