#!/usr/bin/env bash
# The main job on the built-in sample corpus: installs the dependencies, builds, makes the corpus,
# prepares the feature cache with 3 MPI ranks, verifies it, then trains the tiny model for 300
# steps with 3 ranks (1 data rank feeding 2 model ranks) on the CPU, showing the loss fall, and
# ends with the bottleneck report rank 0 writes (report.md printed here).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/make-sample-corpus.sh data/sample-corpus
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run_dir=${RUN_DIR:-runs/quickstart}
mkdir -p "$run_dir"
echo "== sluice prep: 3 ranks, sample corpus -> $run_dir/cache"
mpirun --bind-to none -np 3 build/launcher/sluice prep -c configs/prep.yaml --corpus data/sample-corpus --out "$run_dir/cache"
echo "== sluice cache verify"
build/launcher/sluice cache verify "$run_dir/cache"
echo "== sluice cache inspect"
build/launcher/sluice cache inspect "$run_dir/cache"
echo "== sluice train: 3 ranks (1 data, 2 model), tiny Transformer TTS, 300 steps on the CPU"
mpirun --bind-to none -np 3 build/launcher/sluice train -c configs/train.yaml \
  --cache "$run_dir/cache" --run-dir "$run_dir/train" --overwrite  # a rerun starts anew
echo "== the bottleneck report ($run_dir/train/report.md; charts in report.html, timeline in trace.json)"
cat "$run_dir/train/report.md"
echo "== done: cache in $run_dir/cache (its prep report: report.md there), checkpoints, timelines and the report in $run_dir/train"
