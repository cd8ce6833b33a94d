#include "cache/cache_facts.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include <hdf5.h>

#include "cache/cache_index.h"
#include "common/error.h"

namespace sluice::cache {

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

namespace {

// Bytes of the first `length` bytes of `fd` that are resident in the page cache.
int64_t resident_bytes(int fd, int64_t length) {
  if (length <= 0) return 0;
  void* map = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> pages(static_cast<size_t>((length + page - 1) / page));
  int64_t resident = 0;
  if (::mincore(map, static_cast<size_t>(length), pages.data()) == 0) {
    for (size_t i = 0; i < pages.size(); ++i) {
      if (pages[i] & 1) resident += std::min<int64_t>(page, length - static_cast<int64_t>(i) * page);
    }
  }
  ::munmap(map, static_cast<size_t>(length));
  return resident;
}

}  // namespace

SequentialRead measure_sequential_read(const std::filesystem::path& dir, int64_t max_bytes) {
  const auto files = list_shard_files(dir);
  if (files.empty()) {
    throw CacheError("no shard files (shard-*.h5) in " + dir.string() + "; prepare a cache with `sluice prep`");
  }
  SequentialRead result;
  std::vector<char> buffer(1 << 20);
  int64_t resident = 0;
  const auto start = std::chrono::steady_clock::now();
  double mincore_seconds = 0.0;
  for (const auto& file : files) {
    if (max_bytes > 0 && result.bytes >= max_bytes) break;
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) throw CacheError("cannot open " + file.string() + " for reading");
    struct stat info {};
    ::fstat(fd, &info);
    const int64_t length = max_bytes > 0 ? std::min<int64_t>(info.st_size, max_bytes - result.bytes) : info.st_size;
    const auto before = std::chrono::steady_clock::now();
    resident += resident_bytes(fd, length);
    mincore_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    int64_t left = length;
    while (left > 0) {
      const ssize_t n = ::read(fd, buffer.data(), static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buffer.size()))));
      if (n <= 0) break;
      left -= n;
      result.bytes += n;
    }
    ::close(fd);
    ++result.files;
  }
  // The residency probe is not part of the read time.
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - mincore_seconds;
  result.mb_per_s = result.seconds > 0 ? static_cast<double>(result.bytes) / 1e6 / result.seconds : 0.0;
  result.resident_before = result.bytes > 0 ? static_cast<double>(resident) / static_cast<double>(result.bytes) : 0.0;
  return result;
}

}  // namespace sluice::cache
