#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include <nlohmann/json.hpp>

#include "common/host.h"
#include "common/log.h"

namespace sluice {
namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Who holds the lock, from what the holder wrote into the file ("pid 123 on host n1 since ...").
std::string describe_holder(int fd) {
  std::string text(512, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  try {
    const auto holder = nlohmann::json::parse(text);
    return "pid " + std::to_string(holder.at("pid").get<long long>()) + " on host " +
           holder.at("host").get<std::string>() + " since " + holder.at("since").get<std::string>();
  } catch (const std::exception&) {
    return "a process that has not written its pid yet";  // it took the lock a moment ago
  }
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& path, ErrorKind otherwise) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_file_error(errno, "create the lock file", path.string(), otherwise);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    if (saved == EWOULDBLOCK) holder_ = describe_holder(fd);
    ::close(fd);
    if (saved != EWOULDBLOCK) throw_file_error(saved, "lock", path.string(), otherwise);
    return;
  }
  fd_ = fd;
  const std::string holder =
      nlohmann::json{{"pid", static_cast<long long>(::getpid())}, {"host", host_name()}, {"since", utc_now()}}.dump() +
      "\n";
  // Only for the message of a job that is refused: failing to write it (a full disk) is no reason
  // to stop, since the lock itself is held.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    log::get("common")->debug("could not write the holder into {}", path.string());
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sluice
