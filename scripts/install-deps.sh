#!/usr/bin/env bash
# Installs everything sluice needs to build, test and run, from Debian's packages. Idempotent:
# packages already present are not fetched again. Needs root (CI and the dev machines are root).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libsndfile1-dev libflac-dev libsoxr-dev libfftw3-dev
  libtcmalloc-minimal4                  # the allocator sluice-train runs with (launcher/train_binary.h)
  libyaml-cpp-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libsimdjson-dev libxxhash-dev libutf8proc-dev
  libespeak-ng-dev espeak-ng sox
  libgtest-dev libbenchmark-dev chromium
  libtorch-dev libopenblas0-openmp
  python3-h5py python3-torchaudio python3-numpy python3-torch
  python3-dev pybind11-dev              # python/: sluice-python, the Python model ranks (optional)
  slurmctld slurmd slurm-client munge   # tests/slurm: a real Slurm (srun --mpi=pmix: slurm-wlm-basic-plugins)
  iproute2 util-linux procps            # tests/netns: ip netns, unshare; pgrep
  strace                                # PrepJob.OneRankReadsAManyFileListingForAll counts each rank's file calls
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The downloaded .debs (1.6 GB for the whole list) are not needed once installed, and the build and
# the tests need the disk: a CI machine ran out of it while linking.
apt-get clean
echo "install-deps: done"
