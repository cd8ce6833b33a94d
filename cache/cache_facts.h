#pragma once
// Facts about the HDF5 library and a cache directory's storage, for `sluice doctor` and
// `sluice bench cache`. No HDF5 header here.
#include <cstdint>
#include <filesystem>
#include <string>

namespace sluice::cache {

// The HDF5 library linked at run time (H5get_libversion), e.g. "1.10.8".
std::string hdf5_version();

struct SequentialRead {
  int files = 0;
  int64_t bytes = 0;          // bytes read
  double seconds = 0.0;
  double mb_per_s = 0.0;      // 1e6 bytes per second
  // Fraction of the read bytes that were in the page cache before reading (mincore on a mapping
  // of each file). Near 1: the figure is memory speed, not the disk's.
  double resident_before = 0.0;
};

// Reads the cache's shard files (shard-*.h5) front to back with read() in 1 MiB blocks, up to
// `max_bytes` in all (0: no limit), after measuring how much of them the page cache holds.
// Throws CacheError when the directory has no shard files.
SequentialRead measure_sequential_read(const std::filesystem::path& dir, int64_t max_bytes = 0);

}  // namespace sluice::cache
