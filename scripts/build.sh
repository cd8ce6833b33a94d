#!/usr/bin/env bash
# Configures and builds sluice into BUILD_DIR (default build/). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# A full build takes about 0.7 GB and the tests up to a few hundred MB more in /tmp: say it before
# the linker runs out of space halfway (as it once did on a CI machine).
mkdir -p "$build_dir"
free_kb=$(df -Pk "$build_dir" | awk 'NR == 2 {print $4}')
if [ -n "$free_kb" ] && [ "$free_kb" -lt 1500000 ]; then
  echo "build.sh: only $((free_kb / 1024)) MB free for $build_dir (a build takes about 700 MB, the tests more);" \
       "free some disk or set BUILD_DIR to a roomier place" >&2
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
