#include "runtime/prep/prep_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/host.h"
#include "common/log.h"

namespace sluice::runtime {
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

PrepLock::PrepLock(const std::filesystem::path& cache_dir) {
  const std::filesystem::path path = cache_dir / file_name;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_file_error(errno, "create the lock file", path.string(), ErrorKind::cache);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    const std::string holder = saved == EWOULDBLOCK ? describe_holder(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (saved != EWOULDBLOCK) throw_file_error(saved, "lock", path.string(), ErrorKind::cache);
    throw CacheError("another prep holds this cache (" + holder + "): " + path.string() +
                     " is locked. Wait for that prep to finish (or stop it), or write to another --out; "
                     "a prep that died releases the lock by itself");
  }
  const std::string holder =
      nlohmann::json{{"pid", static_cast<long long>(::getpid())}, {"host", host_name()}, {"since", utc_now()}}.dump() +
      "\n";
  // Only for the message of a prep that is refused: failing to write it (a full disk) is no reason
  // to stop, since the lock itself is held.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    log::get("runtime")->debug("could not write the holder into {}", path.string());
  }
}

PrepLock::~PrepLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sluice::runtime
