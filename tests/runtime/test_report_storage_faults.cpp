// The bottleneck report against storage faults made from OUTSIDE the process: the cache on a real
// block device (a loop device over a file, ext4) whose reads the data rank's cgroup throttles
// (blkio.throttle.read_bps_device on cgroup v1, io.max on v2), a prep onto such a device whose
// writes its cgroup throttles, and a prep whose output file system fills up (a small tmpfs). The real binary under mpirun; each case asserts the verdict's class,
// the rank it names and the cause it gives (docs/report.md). Skipped where loop devices, mounting
// or an I/O-throttling cgroup are not available (not root, a container without CAP_SYS_ADMIN).
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/report_json.h"
#include "tests/support/small_disk.h"
#include "tests/support/text_file.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

using test::read_json;
using test::run_command;
using test::read_text;
using test::verdict;
using test::verdict_text;

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// An ext4 file system on a loop device over an image file, mounted at `mount_point`. Every step
// is undone in the destructor, also after a failed assertion: unmount (lazily if still busy), detach
// the loop device, remove the image. why_not() says what failed where it cannot be made.
class LoopDisk {
 public:
  LoopDisk(const fs::path& image, const fs::path& mount_point, int megabytes) : image_(image), at_(mount_point) {
    if (::geteuid() != 0) {
      why_not_ = "needs root (losetup, mount)";
      return;
    }
    if (!fs::exists("/dev/loop-control")) {
      why_not_ = "no /dev/loop-control (no loop devices in this container)";
      return;
    }
    fs::create_directories(at_);
    std::ofstream(image_).close();
    fs::resize_file(image_, static_cast<uintmax_t>(megabytes) << 20);
    const auto attach = run_command("losetup -f --show " + image_.string());
    if (attach.exit_code != 0 || attach.output.rfind("/dev/loop", 0) != 0) {
      why_not_ = "losetup cannot attach a loop device: " + trimmed(attach.output);
      return;
    }
    device_ = trimmed(attach.output);
    const auto format = run_command("mkfs.ext4 -q -F " + device_);
    if (format.exit_code != 0) {
      why_not_ = "mkfs.ext4 failed: " + trimmed(format.output);
      return;
    }
    if (!mount()) why_not_ = "cannot mount " + device_ + ": " + std::strerror(errno);
  }
  ~LoopDisk() {
    if (mounted_ && ::umount(at_.c_str()) != 0) ::umount2(at_.c_str(), MNT_DETACH);
    if (!device_.empty()) run_command("losetup -d " + device_);
    std::error_code ignored;
    fs::remove(image_, ignored);
  }
  LoopDisk(const LoopDisk&) = delete;
  LoopDisk& operator=(const LoopDisk&) = delete;

  const std::string& why_not() const { return why_not_; }
  const std::string& device() const { return device_; }
  // Unmounted and mounted again: its files' pages leave the page cache, so the next reads go to the device.
  bool remount() {
    if (::umount(at_.c_str()) != 0) return false;
    mounted_ = false;
    return mount();
  }
  // "major:minor" of the loop device, the key of the cgroup's I/O limits.
  std::string device_number() const {
    struct stat info {};
    if (::stat(device_.c_str(), &info) != 0) return {};
    return std::to_string(major(info.st_rdev)) + ":" + std::to_string(minor(info.st_rdev));
  }

 private:
  bool mount() {
    mounted_ = ::mount(device_.c_str(), at_.c_str(), "ext4", 0, nullptr) == 0;
    return mounted_;
  }

  fs::path image_, at_;
  std::string device_, why_not_;
  bool mounted_ = false;
};

// A child cgroup whose reads from (or writes to) one block device are limited to `bytes_per_s`
// (v1 blkio throttle, else v2 io.max); removed in the destructor once its processes have left.
// ok() is false where neither controller is writable. On v1 a write limit holds for the writes
// the cgroup's own tasks submit: direct I/O and the writeback an fsync does (a prep writer's
// commit), not the kernel flusher's.
class IoThrottle {
 public:
  enum class Direction { read, write };
  IoThrottle(const std::string& name, const std::string& device_number, int64_t bytes_per_s, Direction direction) {
    const fs::path v1 = "/sys/fs/cgroup/blkio", v2 = "/sys/fs/cgroup";
    const bool reads = direction == Direction::read;
    const std::string v1_file = reads ? "blkio.throttle.read_bps_device" : "blkio.throttle.write_bps_device";
    const std::string v2_key = std::string(reads ? "rbps=" : "wbps=") + std::to_string(bytes_per_s);
    std::error_code error;
    if (fs::exists(v1 / v1_file)) {
      if (!fs::create_directory(v1 / name, error) && error) return;
      dir_ = v1 / name;
      std::ofstream(dir_ / v1_file) << device_number << " " << bytes_per_s;
      ok_ = read_text(dir_ / v1_file).find(device_number + " " + std::to_string(bytes_per_s)) != std::string::npos;
    } else if (read_text(v2 / "cgroup.controllers").find("io") != std::string::npos) {
      std::ofstream(v2 / "cgroup.subtree_control") << "+io";
      if (!fs::create_directory(v2 / name, error) && error) return;
      dir_ = v2 / name;
      std::ofstream(dir_ / "io.max") << device_number << " " << v2_key;
      ok_ = read_text(dir_ / "io.max").find(v2_key) != std::string::npos;
    }
  }
  ~IoThrottle() {
    if (dir_.empty()) return;
    for (int i = 0; i < 100 && !trimmed(read_text(dir_ / "cgroup.procs")).empty(); ++i) std::this_thread::sleep_for(100ms);
    std::error_code ignored;
    fs::remove(dir_, ignored);
  }
  IoThrottle(const IoThrottle&) = delete;
  IoThrottle& operator=(const IoThrottle&) = delete;

  bool ok() const { return ok_; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  bool ok_ = false;
};

class ReportStorageFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
};

// The cache lives on a loop device; after prep it is unmounted and mounted again (its pages leave
// the page cache) and the data rank (rank 0 of 1 data + 1 model rank) runs in a cgroup that lets
// it read that device at 250 kB/s (the cache is 14 MB; a step of the light model takes about a second). The model rank waits for batches; the data rank's readers sit
// in cache_read, its process almost idle. The report must say input-bound, name rank 0 and its
// cache's storage as the cause with the rate the device delivered (at most the limit), and not
// blame the transport, credits or a lack of reader threads.
TEST_F(ReportStorageFaults, ThrottledCacheDeviceIsTheInputBottleneck) {
  const fs::path work = test::scratch_dir("report-storage", "slow-disk");
  LoopDisk disk(work / "disk.img", work / "mnt", 96);
  if (!disk.why_not().empty()) GTEST_SKIP() << "no loop-device file system here: " << disk.why_not();
  constexpr int64_t limit = 250 * 1000;
  IoThrottle throttle("sluice-test-read-" + std::to_string(::getpid()), disk.device_number(), limit,
                      IoThrottle::Direction::read);
  if (!throttle.ok()) {
    GTEST_SKIP() << "no writable I/O throttle (cgroup v1 blkio.throttle.read_bps_device or v2 io.max) for "
                 << disk.device() << " here";
  }
  const fs::path cache = work / "mnt" / "cache";
  const auto prep = run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " +
                                cache.string() + " --set cache.shard_size=32");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  ASSERT_TRUE(disk.remount()) << "cannot remount " << disk.device() << ": " << std::strerror(errno);

  // Rank 0 (the data rank) enters the throttled cgroup before it becomes sluice: every read it
  // makes from the device is limited, from its first one on.
  const fs::path run_dir = work / "run";
  const std::string train =
      std::string(SLUICE_BINARY) + " train --cache " + cache.string() + " --run-dir " + run_dir.string() +
      " --steps 30 --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10"
      " --set train.log_every=1000 --set train.validation_every=0 --set train.checkpoint_every=0"
      " --set runtime.status_every_s=0 --set runtime.timeout_s=120 --set train.reader_threads=1";
  const std::string command = std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 sh -c '" +
                              "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then echo $$ > " +
                              (throttle.dir() / "cgroup.procs").string() + " || exit 9; fi; exec " + train + "'";
  const auto result = run_command(command);
  ASSERT_EQ(result.exit_code, 0) << result.output;

  const json report = read_json(run_dir / "report.json");
  ASSERT_TRUE(report["steady_state"]["enough"].get<bool>()) << report["steady_state"];
  const json input = verdict(report, "input_bound");
  ASSERT_FALSE(input.is_null()) << verdict_text(report);
  std::printf("%s", verdict_text(report).c_str());
  EXPECT_EQ(input["rank"], 0) << input;
  EXPECT_EQ(input["numbers"]["busiest_data_rank"], 0) << input;
  EXPECT_EQ(input["numbers"]["busiest_data_stage"], "cache_read") << input;
  EXPECT_EQ(input["numbers"]["cause"], "cache_storage") << verdict_text(report);
  // The device's rate as the process saw it: real bytes, never faster than the limit allows (a
  // little over it: the throttle lets a first burst through and samples are 250 ms apart).
  const double rate = input["numbers"].value("storage_bytes_per_s", 0.0);
  EXPECT_GT(rate, 0.0) << input;
  EXPECT_LT(rate, 1.5 * static_cast<double>(limit)) << input;
  EXPECT_GT(input["numbers"].value("storage_read_bytes", int64_t{0}), 0) << input;
  const std::string summary = input["summary"].get<std::string>();
  EXPECT_NE(summary.find("rank 0's readers waited for the cache's storage"), std::string::npos) << summary;
  const std::string advice = input["recommendation"].get<std::string>();
  EXPECT_NE(advice.find("the device under the cache is the limit"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("Raise train.credits"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("raise train.reader_threads"), std::string::npos) << advice;
  // Neither the feed nor the CPU is blamed: no descheduled rank, no exposed batch transfer.
  EXPECT_TRUE(verdict(report, "descheduled").is_null()) << verdict_text(report);
  const json comm = verdict(report, "communication_bound");
  if (!comm.is_null()) {
    EXPECT_NE(comm["numbers"]["exposed"], "transfer") << verdict_text(report);
  }
  // The per-rank row says the same: rank 0 read from the device, rank 1 (the model rank) hardly.
  for (const auto& c : report["cpu"]) {
    if (c["rank"] == 0) {
      EXPECT_GT(c.value("storage_read_bytes", int64_t{0}), 0) << c;
    }
  }
}

// Prep (2 ranks) writes a 14 MB cache onto a 6 MB file system: a shard write fails with "no space
// left on device", the job exits 5 (the environment's code) and writes no manifest. The report
// must say the job stopped on that error (the rank, the file) and not call it a hang.
TEST_F(ReportStorageFaults, PrepOnAFullDiskIsAStopNotAHang) {
  const fs::path work = test::scratch_dir("report-storage", "full-disk");
  test::SmallDisk disk(work / "mnt");
  if (!disk.resize(6 * 1024)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const fs::path cache = work / "mnt" / "cache";
  const auto prep = run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 " + SLUICE_BINARY +
                                " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " + cache.string() +
                                " --set cache.shard_size=32 --set runtime.timeout_s=120");
  ASSERT_EQ(prep.exit_code, 5) << prep.output;
  ASSERT_FALSE(fs::exists(cache / "manifest.json"));
  const auto offline = run_command(std::string(SLUICE_BINARY) + " report " + cache.string());
  ASSERT_EQ(offline.exit_code, 0) << offline.output;
  EXPECT_EQ(offline.output.find("hang HIGH"), std::string::npos) << offline.output;
  const json report = read_json(cache / "report.json");
  std::printf("%s", verdict_text(report).c_str());
  EXPECT_TRUE(verdict(report, "hang").is_null()) << verdict_text(report);
  const json stop = verdict(report, "stopped");
  ASSERT_FALSE(stop.is_null()) << verdict_text(report);
  EXPECT_EQ(stop["numbers"]["reason"], "environment_error") << stop;
  const int failed = stop["numbers"]["error_rank"].get<int>();
  EXPECT_TRUE(failed == 0 || failed == 1) << stop;
  EXPECT_EQ(stop["rank"], failed) << stop;
  const std::string error = stop["numbers"]["error"].get<std::string>();
  EXPECT_NE(error.find("no space left on device"), std::string::npos) << error;
  EXPECT_NE(error.find((cache / "shard-").string()), std::string::npos) << "the error names the file: " << error;
  const std::string summary = stop["summary"].get<std::string>();
  EXPECT_NE(summary.find("it did not hang: rank " + std::to_string(failed)), std::string::npos) << summary;
  EXPECT_NE(summary.find("no space left on device"), std::string::npos) << summary;
  EXPECT_NE(stop["recommendation"].get<std::string>().find("free space on that file system"), std::string::npos)
      << stop;
}

// Prep (2 ranks, 1 worker each) writes the sample corpus's cache onto a loop device that its
// cgroup may write at 2 MB/s: each shard's commit (its fsync) waits for the device, the workers
// finish their rows and wait for the writer. The report must say write_bound, name a rank, give
// storage as the cause with the rate the device took (at most the limit), and not call the run
// balanced. The same prep unthrottled on the same file system first: not write-bound.
TEST_F(ReportStorageFaults, PrepOnAWriteThrottledDiskIsWriteBound) {
  const fs::path work = test::scratch_dir("report-storage", "slow-write");
  LoopDisk disk(work / "disk.img", work / "mnt", 96);
  if (!disk.why_not().empty()) GTEST_SKIP() << "no loop-device file system here: " << disk.why_not();
  constexpr int64_t limit = 2'000'000;
  IoThrottle throttle("sluice-test-write-" + std::to_string(::getpid()), disk.device_number(), limit,
                      IoThrottle::Direction::write);
  if (!throttle.ok()) {
    GTEST_SKIP() << "no writable I/O throttle (cgroup v1 blkio.throttle.write_bps_device or v2 io.max) for "
                 << disk.device() << " here";
  }
  const auto prep = [&](const fs::path& cache, bool throttled) {
    const std::string sluice = std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " +
                               cache.string() + " --threads 1 --set cache.shard_size=32 --set runtime.timeout_s=120";
    const std::string enter = throttled ? "echo $$ > " + (throttle.dir() / "cgroup.procs").string() + " || exit 9; " : "";
    return run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 sh -c '" + enter + "exec " +
                       sluice + "'");
  };

  const fs::path free_cache = work / "mnt" / "free";
  const auto free_run = prep(free_cache, false);
  ASSERT_EQ(free_run.exit_code, 0) << free_run.output;
  const json free_report = read_json(free_cache / "report.json");
  EXPECT_TRUE(verdict(free_report, "write_bound").is_null()) << verdict_text(free_report);

  const fs::path cache = work / "mnt" / "throttled";
  const auto result = prep(cache, true);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(fs::exists(cache / "manifest.json"));
  const json report = read_json(cache / "report.json");
  std::printf("%s", verdict_text(report).c_str());
  const json bound = verdict(report, "write_bound");
  ASSERT_FALSE(bound.is_null()) << verdict_text(report);
  EXPECT_TRUE(verdict(report, "balanced").is_null()) << verdict_text(report);
  const int rank = bound["rank"].get<int>();
  EXPECT_TRUE(rank == 0 || rank == 1) << bound;
  EXPECT_EQ(bound["numbers"]["cause"], "storage") << bound;
  EXPECT_EQ(bound["numbers"]["write_bound_ranks"], 2) << bound;
  EXPECT_GE(bound["numbers"]["write_fraction"].get<double>(), 0.8) << bound;
  EXPECT_LT(bound["numbers"]["writer_cpu_fraction"].get<double>(), 0.5) << bound;
  // The rate is the rank's own bytes of mels over its writer's busy time: real bytes, never faster
  // than the device's limit, which both ranks share (a first burst passes before the throttle).
  const double together = bound["numbers"]["write_bytes_per_s_together"].get<double>();
  EXPECT_GT(bound["numbers"]["write_bytes_per_s"].get<double>(), 0.0) << bound;
  EXPECT_LT(together, 1.5 * static_cast<double>(limit)) << bound;
  const std::string summary = bound["summary"].get<std::string>();
  EXPECT_NE(summary.find("waited for the cache's storage"), std::string::npos) << summary;
  EXPECT_NE(bound["recommendation"].get<std::string>().find("the storage under --out is the limit"), std::string::npos)
      << bound;
}

}  // namespace
}  // namespace sluice
