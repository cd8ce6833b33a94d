#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace sluice {

namespace {
constexpr size_t write_piece_bytes = 1 << 20;
}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), temp_(path_.string() + ".tmp-" + std::to_string(::getpid())) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create");
  buffer_.reserve(write_piece_bytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFileWriter::fail(const std::string& what) {
  const int saved = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  throw_file_error(saved, what, path_.string(), ErrorKind::internal);
}

void AtomicFileWriter::write(std::string_view piece) {
  if (buffer_.size() + piece.size() > write_piece_bytes) flush();
  if (piece.size() >= write_piece_bytes) {
    write_out(piece);  // a large piece goes out as it is, not copied into the buffer first
    return;
  }
  buffer_.append(piece);
}

void AtomicFileWriter::flush() {
  write_out(buffer_);
  buffer_.clear();
}

void AtomicFileWriter::write_out(std::string_view bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    written += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  flush();
  if (::fsync(fd_) != 0) fail("fsync");
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename into place");
}

void write_file_atomically(const std::filesystem::path& path, const std::string& content) {
  AtomicFileWriter file(path);
  file.write(content);
  file.commit();
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_file_error(errno, "read", path.string(), ErrorKind::internal);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}
}  // namespace sluice
