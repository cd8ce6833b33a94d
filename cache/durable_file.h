#pragma once
// INTERNAL to cache/: the steps of an atomic, durable file replacement (write to a temporary
// name, fsync it, rename it over the final name, fsync the directory), shared by the shard
// writer, the index writer and the manifest writer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"

namespace sluice::cache::durable {

// "<final>.tmp-<host>-<pid>": unique per writer, never matches a final name, and says who left it.
inline std::filesystem::path temporary_name(const std::filesystem::path& final_path) {
  char host[256] = "host";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  return final_path.string() + ".tmp-" + host + "-" + std::to_string(getpid());
}

// Whether name is such a temporary of some final name.
inline bool is_temporary_name(const std::string& name) {
  return name.find(".tmp-") != std::string::npos;
}

inline void fsync_path(const std::filesystem::path& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw_file_error(errno, "open (to fsync it)", path.string(), ErrorKind::cache);
  int status = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (status != 0) throw_file_error(saved, "fsync", path.string(), ErrorKind::cache);
}

// Creates (truncating) `path` and writes `content` to it with write(2), so that a failure keeps
// its errno (a full disk is an EnvironmentError naming the path). The file is removed on failure.
inline void write_whole_file(const std::filesystem::path& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_file_error(errno, "create", path.string(), ErrorKind::cache);
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(path.c_str());
      throw_file_error(saved, "write", path.string(), ErrorKind::cache);
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(path.c_str());
    throw_file_error(saved, "write", path.string(), ErrorKind::cache);
  }
}

// fsyncs a closed temporary file, renames it to final_path, and fsyncs the directory so that the
// rename itself survives a crash. Readers see either no file or the complete file at final_path.
inline void publish(const std::filesystem::path& temporary,
                    const std::filesystem::path& final_path) {
  fsync_path(temporary, false);
  if (std::rename(temporary.c_str(), final_path.c_str()) != 0) {
    throw_file_error(errno, "rename to " + final_path.filename().string() + " the file", temporary.string(),
                     ErrorKind::cache);
  }
  std::filesystem::path parent = final_path.parent_path();
  fsync_path(parent.empty() ? std::filesystem::path(".") : parent, true);
}

}  // namespace sluice::cache::durable
