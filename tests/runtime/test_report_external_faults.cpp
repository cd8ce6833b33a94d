// The bottleneck report against faults made from OUTSIDE the process, the way they happen on a
// cluster: a rank stopped and continued by another process (SIGSTOP/SIGCONT, as a debugger or job
// control does), a rank held to a fifth of a core by a cgroup CPU quota, a corpus with more bad
// rows than prep.max_reject_fraction. The real binary, real mpirun ranks; each case asserts the
// verdict's class, the rank it names and the cause it gives (docs/report.md).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/report_json.h"
#include "tests/support/text_file.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

using test::read_json;
using test::read_text;
using test::verdict;
using test::verdict_text;

// The pid of the sluice process of MPI rank `rank` whose command line names `marker` (the run's
// unique directory), or -1 while there is none yet.
pid_t find_rank(const std::string& marker, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" train ") == std::string::npos || cmdline.find(marker) == std::string::npos) continue;
    if (cmdline.find("mpiexec") != std::string::npos || cmdline.find("mpirun") != std::string::npos) continue;
    const std::string environ = read_text(entry.path() / "environ");
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    const auto at = environ.find(want);
    if (at != std::string::npos && (at == 0 || environ[at - 1] == '\0') &&
        (at + want.size() == environ.size() || environ[at + want.size()] == '\0')) {
      return static_cast<pid_t>(std::stoi(name));
    }
  }
  return -1;
}

pid_t wait_for_rank(const std::string& marker, int rank, const std::future<test::CommandResult>& run) {
  for (int i = 0; i < 600; ++i) {
    const pid_t pid = find_rank(marker, rank);
    if (pid > 0) return pid;
    if (run.wait_for(50ms) == std::future_status::ready) break;
  }
  return -1;
}

// A child cgroup with a CPU quota of `cores` (cgroup v2 cpu.max, else v1 cpu.cfs_quota_us);
// removed when destroyed. ok() is false where cgroups are not writable (not root, read-only).
class CpuQuota {
 public:
  explicit CpuQuota(const std::string& name, double cores) {
    const auto quota_us = static_cast<long>(cores * 100000);
    for (const fs::path& root : {fs::path("/sys/fs/cgroup"), fs::path("/sys/fs/cgroup/cpu")}) {
      const bool v2 = root == "/sys/fs/cgroup" && fs::exists(root / "cgroup.controllers");
      if (!v2 && !fs::exists(root / "cpu.cfs_quota_us")) continue;
      if (v2) std::ofstream(root / "cgroup.subtree_control") << "+cpu";
      std::error_code error;
      fs::create_directory(root / name, error);
      if (error) continue;
      std::ofstream(root / name / (v2 ? "cpu.max" : "cpu.cfs_quota_us"))
          << (v2 ? std::to_string(quota_us) + " 100000" : std::to_string(quota_us));
      const std::string written = read_text(root / name / (v2 ? "cpu.max" : "cpu.cfs_quota_us"));
      if (written.rfind(std::to_string(quota_us), 0) == 0) {
        dir_ = root / name;
        return;
      }
      fs::remove(root / name, error);
    }
  }
  ~CpuQuota() {
    if (dir_.empty()) return;
    for (int i = 0; i < 50 && !read_text(dir_ / "cgroup.procs").empty(); ++i) std::this_thread::sleep_for(100ms);
    std::error_code error;
    fs::remove(dir_, error);
  }
  bool ok() const { return !dir_.empty(); }
  std::string where() const { return dir_.string(); }
  bool move(pid_t pid) const {
    std::ofstream(dir_ / "cgroup.procs") << pid;
    return read_text(dir_ / "cgroup.procs").find(std::to_string(pid)) != std::string::npos;
  }

 private:
  fs::path dir_;
};

class ReportExternalFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("report-faults", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // A light run: 30 steps (5 warm-up dropped leave 25 steady ones), no validation, checkpoint or
  // log line inside the window; a deadline generous enough for a rank that runs a quarter of the time.
  static std::future<test::CommandResult> train(int ranks, const fs::path& run_dir, const std::string& extra = "") {
    const std::string command =
        std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " +
        SLUICE_BINARY + " train --cache " + cache_.string() + " --run-dir " + run_dir.string() +
        " --steps 30 --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10"
        " --set train.log_every=1000 --set train.validation_every=0 --set train.checkpoint_every=0"
        " --set runtime.status_every_s=0 --set runtime.timeout_s=120 " + extra;
    return std::async(std::launch::async, [command] { return test::run_command(command); });
  }

  static fs::path cache_;
};
fs::path ReportExternalFaults::cache_;

// Another process stops the data rank 180 ms of every 200 ms (SIGSTOP, SIGCONT) while it trains,
// with one credit and one batch read ahead so that it cannot work far ahead of its model rank.
// The model rank waits for batches and the data rank's send spans stretch: from the spans alone
// that reads as a slow feed ("raise train.credits"). The report must name rank 0 as descheduled,
// running about a tenth of the time, and not blame the transport.
TEST_F(ReportExternalFaults, StoppedDataRankIsNamedNotTheFeed) {
  const fs::path run_dir = test::scratch_dir("report-faults", "stopped-data-rank");
  auto run = train(2, run_dir, "--set train.credits=1 --set train.read_ahead=1 --set train.reader_threads=1");
  const pid_t data_rank = wait_for_rank(run_dir.string(), 0, run);
  ASSERT_GT(data_rank, 0) << "rank 0 of the run never appeared";
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    while (!done) {
      if (::kill(data_rank, SIGSTOP) != 0) break;  // gone
      std::this_thread::sleep_for(180ms);
      ::kill(data_rank, SIGCONT);
      std::this_thread::sleep_for(20ms);
    }
    ::kill(data_rank, SIGCONT);
  });
  const auto result = run.get();
  done = true;
  stopper.join();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = read_json(run_dir / "report.json");
  ASSERT_TRUE(report["steady_state"]["enough"].get<bool>()) << report["steady_state"];
  const json stopped = verdict(report, "descheduled");
  ASSERT_FALSE(stopped.is_null()) << verdict_text(report);
  EXPECT_EQ(stopped["rank"], 0) << stopped;
  EXPECT_EQ(stopped["severity"], "HIGH");
  EXPECT_EQ(stopped["numbers"]["cause"], "stopped_or_starved") << stopped;
  EXPECT_LT(stopped["numbers"]["ran_fraction"].get<double>(), 0.5) << stopped;
  EXPECT_NE(stopped["summary"].get<std::string>().find("rank 0 ran"), std::string::npos) << stopped;
  EXPECT_NE(stopped["summary"].get<std::string>().find("starved of CPU or stopped"), std::string::npos) << stopped;
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] == "descheduled") {
      EXPECT_EQ(v["rank"], 0) << "only rank 0 was stopped: " << v;
    }
  }
  const json input = verdict(report, "input_bound");
  ASSERT_FALSE(input.is_null()) << verdict_text(report);
  EXPECT_EQ(input["numbers"]["descheduled_rank"], 0) << input;
  EXPECT_EQ(input["recommendation"].get<std::string>().find("Raise train.credits"), std::string::npos) << input;
  // The padding of the run's planned batches is in the report (rank 0 wrote padding.json).
  ASSERT_TRUE(fs::exists(run_dir / "padding.json"));
  const double real_share = report["padding"]["total"]["frame_efficiency"].get<double>();
  EXPECT_GT(real_share, 0.0);
  EXPECT_LE(real_share, 1.0);
  EXPECT_EQ(!verdict(report, "padding").is_null(), real_share < 0.9) << verdict_text(report);
}

// Model rank 2 of 1 data + 2 model ranks is moved into a cgroup with a CPU quota of 0.2 cores: its
// own work per step takes several times the other's while the all-reduce evens out the step time.
// The report must name rank 2 as held by its cgroup's CPU quota (descheduled, cause cpu_quota) and,
// when the other model rank got at least twice its CPU, as the straggler with its cost; no verdict
// may point at a straggler verdict that is not there.
TEST_F(ReportExternalFaults, ModelRankUnderACpuQuotaIsTheStraggler) {
  const std::string name = "sluice-test-quota-" + std::to_string(::getpid());
  CpuQuota quota(name, 0.2);
  if (!quota.ok()) GTEST_SKIP() << "no writable cgroup cpu controller here (needs root and /sys/fs/cgroup)";
  const fs::path run_dir = test::scratch_dir("report-faults", "quota-model-rank");
  auto run = train(3, run_dir);
  const pid_t slow = wait_for_rank(run_dir.string(), 2, run);
  ASSERT_GT(slow, 0) << "rank 2 of the run never appeared";
  ASSERT_TRUE(quota.move(slow)) << "could not move pid " << slow << " into " << quota.where();
  const auto result = run.get();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = read_json(run_dir / "report.json");
  ASSERT_TRUE(report["steady_state"]["enough"].get<bool>()) << report["steady_state"];
  // What the OS gave each model rank: a quota makes rank 2 a straggler only when the other model
  // rank got clearly more CPU; on a machine so loaded that every rank gets about the quota, it is
  // not slower than the rest (the descheduled verdict below still names the quota).
  double other_cores = 0, held_cores = 0;
  for (const auto& c : report["cpu"]) {
    if (c["rank"] == 1) other_cores = c["cpu_cores_mean"].get<double>();
    if (c["rank"] == 2) held_cores = c["cpu_cores_mean"].get<double>();
  }
  int stragglers = 0;
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] != "straggler") continue;
    ++stragglers;
    EXPECT_EQ(v["rank"], 2) << v;
    EXPECT_GT(v["numbers"]["cost_seconds_steady"].get<double>(), 0.0) << v;
    // On CPU ranks the fast rank's backward absorbs part of the wait, so its busy time is not its own work alone.
    EXPECT_GT(v["numbers"]["busy_seconds_p50"].get<double>(), 1.2 * v["numbers"]["role_busy_seconds_p50"].get<double>())
        << v;
    EXPECT_NE(v["summary"].get<std::string>().find("CPU quota"), std::string::npos) << v;
  }
  if (other_cores >= 2 * held_cores) {
    EXPECT_EQ(stragglers, 1) << "rank 1 used " << other_cores << " cores, rank 2 " << held_cores << "\n"
                             << verdict_text(report);
  } else {
    std::printf("note: rank 1 used %.2f cores, rank 2 %.2f: the machine is too loaded for the quota to make rank 2 "
                "slower than rank 1; only the descheduled verdict is required\n", other_cores, held_cores);
    EXPECT_LE(stragglers, 1) << verdict_text(report);
  }
  // No verdict points at a straggler verdict that is not there.
  if (stragglers == 0) {
    EXPECT_EQ(verdict_text(report).find("straggler"), std::string::npos) << verdict_text(report);
  }
  const json held = verdict(report, "descheduled");
  ASSERT_FALSE(held.is_null()) << verdict_text(report);
  EXPECT_EQ(held["rank"], 2) << held;
  EXPECT_EQ(held["numbers"]["cause"], "cpu_quota") << held;
  EXPECT_NEAR(held["numbers"]["quota_cores"].get<double>(), 0.2, 1e-9) << held;
  EXPECT_NE(held["summary"].get<std::string>().find("rank 2 was held to 0.20 cores by its cgroup's CPU quota"),
            std::string::npos)
      << held;
}

// A corpus whose rows are a third undecodable: prep stops on purpose (exit 3, no manifest). The
// report must say it stopped because of the rejects and point at rejects.jsonl; no hang, no rank.
TEST_F(ReportExternalFaults, PrepOverTheRejectLimitIsAStopNotAHang) {
  const fs::path corpus = test::scratch_dir("report-faults", "bad-corpus");
  fs::copy(SLUICE_SAMPLE_CORPUS, corpus, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  int corrupted = 0, rows = 0;
  for (const auto& entry : fs::directory_iterator(corpus / "wavs")) {
    if (rows++ % 3 != 0) continue;
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "not a wav file, written by the test";
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  const fs::path cache = test::scratch_dir("report-faults", "bad-cache");
  const auto result = test::run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 " +
                                        SLUICE_BINARY + " prep --corpus " + corpus.string() + " --out " +
                                        cache.string() + " --set cache.shard_size=16 --set runtime.timeout_s=120");
  ASSERT_EQ(result.exit_code, 3) << result.output;
  const auto offline = test::run_command(std::string(SLUICE_BINARY) + " report " + cache.string());
  ASSERT_EQ(offline.exit_code, 0) << offline.output;
  EXPECT_EQ(offline.output.find("hang HIGH"), std::string::npos) << offline.output;
  const json report = read_json(cache / "report.json");
  EXPECT_TRUE(verdict(report, "hang").is_null()) << verdict_text(report);
  const json stop = verdict(report, "stopped");
  ASSERT_FALSE(stop.is_null()) << verdict_text(report);
  EXPECT_EQ(stop["rank"], -1) << stop;
  EXPECT_EQ(stop["numbers"]["reason"], "too_many_rejects") << stop;
  EXPECT_GE(stop["numbers"]["rejects"].get<int>(), corrupted) << stop;
  EXPECT_NEAR(stop["numbers"]["max_reject_fraction"].get<double>(), 0.05, 1e-12) << stop;
  EXPECT_NE(stop["summary"].get<std::string>().find("prep.max_reject_fraction"), std::string::npos) << stop;
  EXPECT_NE(stop["recommendation"].get<std::string>().find((cache / "rejects.jsonl").string()), std::string::npos)
      << stop;
  EXPECT_TRUE(fs::exists(cache / "rejects.jsonl"));
}

}  // namespace
}  // namespace sluice
