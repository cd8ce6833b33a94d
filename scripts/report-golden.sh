#!/usr/bin/env bash
# The report of fixed synthetic runs (tests/report/report_golden_runs.cpp), for comparing the
# report before and after a change: report.json must stay byte-identical (scripts read it).
#   scripts/report-golden.sh /tmp/report-before   # on the old code
#   scripts/report-golden.sh /tmp/report-after    # on the new code
#   diff -r /tmp/report-before /tmp/report-after
# The runs are written in one fixed directory first, so that the paths report.md and report.html
# name are the same for both.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
build=${BUILD_DIR:-$(dirname "$0")/../build}
work=${TMPDIR:-/tmp}/sluice-report-golden-work
cmake --build "$build" --target report_golden_runs >/dev/null
rm -rf "$work" "$out"
"$build/tests/report/report_golden_runs" "$work"
mkdir -p "$(dirname "$out")"
cp -r "$work" "$out"
echo "wrote $(find "$out" -name 'report.*' | wc -l) report files under $out"
