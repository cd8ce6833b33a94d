#pragma once
// Small file operations every layer needs, with errors that name the path.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace sluice {

// Writes `content` to `path` so that a reader sees either the old file or the whole new one:
// temp file in the same directory, fsync, rename. Throws EnvironmentError naming the path when the
// file system refuses (no space, read-only, permission), else Error (kind internal).
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

// The same, written piece by piece: for a file too large to hold as one string next to what it is
// made from (report.json of 16,384 ranks is ~500 MB). Until commit() the pieces go to a temp file
// beside `path`; commit() fsyncs it and renames it into place; destroyed uncommitted (an exception
// while writing), the temp file is removed and `path` keeps what it held. Errors as above.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::string_view piece);
  void commit();

 private:
  void flush();
  void write_out(std::string_view bytes);
  [[noreturn]] void fail(const std::string& what);

  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  std::string buffer_;  // written out in pieces of about a megabyte
};

// The whole file as a string; throws naming the path.
std::string read_file(const std::filesystem::path& path);

// A stat result's modification time in nanoseconds since the epoch (prep's fingerprint input).
inline int64_t modified_ns(const struct stat& status) {
  return static_cast<int64_t>(status.st_mtim.tv_sec) * 1000000000 + status.st_mtim.tv_nsec;
}

}  // namespace sluice
