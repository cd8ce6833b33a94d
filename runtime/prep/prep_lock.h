#pragma once
// One `sluice prep` at a time per cache directory.
//
// Two preps into one directory would delete each other's temporaries (every run clears leftovers
// of killed runs before it writes) and race on the index and manifest. Rank 0 therefore holds an
// exclusive flock(2) on CACHE_DIR/prep.lock for the whole job; the file says who holds it (pid,
// host, start time) so that the second prep's refusal can name them.
//
// flock belongs to the open file, so the kernel releases it when the holder exits in any way
// (return, exception, SIGKILL, a crash): a lock file left by a dead prep never blocks the next
// one, and there is nothing to clean up. flock is advisory and per host on local file systems;
// on NFS, Linux maps it to an NFS lock (NFSv4, or NFSv3 with lockd), which works across hosts.
#include <filesystem>
#include <string>

namespace sluice::runtime {

class PrepLock {
 public:
  // Takes the lock without waiting. Throws CacheError "another prep holds this cache (pid N on host
  // H since T)..." when another process holds it, or EnvironmentError / CacheError when the lock
  // file cannot be created (read-only or full file system, permissions).
  explicit PrepLock(const std::filesystem::path& cache_dir);
  ~PrepLock();  // releases the lock (closes the file); the file stays
  PrepLock(const PrepLock&) = delete;
  PrepLock& operator=(const PrepLock&) = delete;

  static constexpr const char* file_name = "prep.lock";

 private:
  int fd_ = -1;
};

}  // namespace sluice::runtime
