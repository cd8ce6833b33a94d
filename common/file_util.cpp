#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace sluice {

void write_file_atomically(const std::filesystem::path& path, const std::string& content) {
  const std::filesystem::path temp = path.string() + ".tmp-" + std::to_string(::getpid());
  auto fail = [&](const std::string& what) {
    const int saved = errno;
    ::unlink(temp.c_str());
    throw_file_error(saved, what, path.string(), ErrorKind::internal);
  };
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create");
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("write");
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("rename into place");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_file_error(errno, "read", path.string(), ErrorKind::internal);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}
}  // namespace sluice
