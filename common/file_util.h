#pragma once
// Small file operations every layer needs, with errors that name the path.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace sluice {

// Writes `content` to `path` so that a reader sees either the old file or the whole new one:
// temp file in the same directory, fsync, rename. Throws EnvironmentError naming the path when the
// file system refuses (no space, read-only, permission), else Error (kind internal).
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

// The whole file as a string; throws naming the path.
std::string read_file(const std::filesystem::path& path);

// A stat result's modification time in nanoseconds since the epoch (prep's fingerprint input).
inline int64_t modified_ns(const struct stat& status) {
  return static_cast<int64_t>(status.st_mtim.tv_sec) * 1000000000 + status.st_mtim.tv_nsec;
}

}  // namespace sluice
