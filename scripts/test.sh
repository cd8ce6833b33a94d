#!/usr/bin/env bash
# The test command: installs the dependencies, builds, makes the sample corpus, runs every test.
# Run from anywhere; CI calls it through .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/make-sample-corpus.sh data/sample-corpus
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
