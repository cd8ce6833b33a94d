#pragma once
// A tmpfs of a chosen size for the tests' disk-full faults, unmounted (lazily if still busy) when
// it goes. Mounting needs CAP_SYS_ADMIN (CI runs as root): resize() says false, with errno set,
// where it is not permitted, and the test skips.
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace sluice::test {

class SmallDisk {
 public:
  explicit SmallDisk(std::filesystem::path at) : at_(std::move(at)) { std::filesystem::create_directories(at_); }
  ~SmallDisk() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  // Mounts (or remounts) at `kib` KiB; false with errno when not permitted.
  bool resize(uint64_t kib) {
    const std::string options = "size=" + std::to_string(kib) + "k";
    const unsigned long flags = mounted_ ? MS_REMOUNT : 0;
    if (::mount("tmpfs", at_.c_str(), "tmpfs", flags, options.c_str()) != 0) return false;
    mounted_ = true;
    return true;
  }
  uint64_t used_kib() const {
    struct statvfs info {};
    ::statvfs(at_.c_str(), &info);
    return (info.f_blocks - info.f_bfree) * info.f_frsize / 1024;
  }
  const std::filesystem::path& path() const { return at_; }

 private:
  std::filesystem::path at_;
  bool mounted_ = false;
};

}  // namespace sluice::test
