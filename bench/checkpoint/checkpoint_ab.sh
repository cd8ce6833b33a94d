#!/usr/bin/env bash
# The step time periodic checkpoints cost, one build against another, interleaved in one run:
# each round trains the same steps with train.checkpoint_every=EVERY on both builds and sums the
# first model rank's checkpoint spans (the time the steps waited for checkpoints), its steady
# step time and, where the build writes in the background, the seconds the writer thread took
# (ranks/rank-0.json, checkpoint_background_seconds).
#
#   bench/checkpoint/checkpoint_ab.sh BASELINE_SLUICE NEW_SLUICE CACHE [ROUNDS=3] [SIZE=small] [STEPS=30] [EVERY=3]
#
# Prints a line per run and the ratio new/baseline of the median checkpoint time on the step path.
set -euo pipefail
baseline=$1 new=$2 cache=$3 rounds=${4:-3} size=${5:-small} steps=${6:-30} every=${7:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one_run() {  # label binary -> "label checkpoint_s background_s wall_s"
  local label=$1 binary=$2 dir=$work/$1
  "$binary" train --cache "$cache" --run-dir "$dir" --steps "$steps" --overwrite \
    --set train.checkpoint_every="$every" --set model.size="$size" --set runtime.status_every_s=0 \
    > "$work/$label.log" 2>&1 || { echo "$label failed:"; tail -5 "$work/$label.log"; exit 1; }
  python3 - "$dir" "$label" <<'PY'
import json, sys
run, label = sys.argv[1], sys.argv[2]
timeline = json.load(open(f"{run}/timeline/rank-0.json"))
checkpoint = timeline["stages"].index("checkpoint")
spent = sum(s[3] - s[2] for s in timeline["spans"] if s[1] == checkpoint) / 1e9
summary = json.load(open(f"{run}/ranks/rank-0.json"))
background = summary.get("checkpoint_background_seconds", 0.0)
print(f"{label} {spent:.4f} {background:.4f} {summary['wall_seconds']:.2f}")
PY
}

for round in $(seq 1 "$rounds"); do
  one_run baseline "$baseline" | tee -a "$work/results"
  one_run new "$new" | tee -a "$work/results"
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
median = lambda label, column: statistics.median(float(r[column]) for r in rows if r[0] == label)
b, n = median("baseline", 1), median("new", 1)
print(f"checkpoint time on the step path, median: baseline {b:.3f} s, new {n:.3f} s, ratio {n / b:.3f}; "
      f"written in the background (new): {median('new', 2):.3f} s; wall: {median('baseline', 3):.1f} s vs {median('new', 3):.1f} s")
PY
