#pragma once
// One job at a time per directory: `sluice prep` per cache directory (CACHE_DIR/prep.lock),
// `sluice train` per run directory (RUN_DIR/train.lock).
//
// Two preps into one directory would delete each other's temporaries and race on the index; two
// trains into one run directory would overwrite each other's checkpoints and timelines. The job's
// rank 0 therefore holds an exclusive flock(2) on a lock file for the whole job; the file says who
// holds it (pid, host, start time) so that the refusal of a second job can name them.
//
// flock belongs to the open file, so the kernel releases it when the holder exits in any way
// (return, exception, SIGKILL, a crash): a lock file left by a dead job never blocks the next one,
// and there is nothing to clean up. flock is advisory and per host on local file systems; on NFS,
// Linux maps it to an NFS lock (NFSv4, or NFSv3 with lockd), which works across hosts.
#include <filesystem>
#include <string>

#include "common/error.h"

namespace sluice {

class FileLock {
 public:
  // Tries to take the lock on `path` (created when missing) without waiting. held() says whether
  // it was had; when not, holder() says who has it. Throws EnvironmentError for a file system
  // that refuses (read-only, full) and an Error of `otherwise` for other failures to create it.
  FileLock(const std::filesystem::path& path, ErrorKind otherwise);
  ~FileLock();  // releases the lock (closes the file); the file stays
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool held() const { return fd_ >= 0; }
  // Who holds the lock that this one could not take: "pid 123 on host n1 since 2026-...Z".
  const std::string& holder() const { return holder_; }

 private:
  int fd_ = -1;
  std::string holder_;
};

}  // namespace sluice
