#include "timing/cpu_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::timing {
namespace {

using namespace std::chrono_literals;

// A child process stops this one three times for 200 ms (SIGSTOP, SIGCONT): the watch, whose
// thread was stopped with every other, sees three stalls of about 200 ms. Made from outside the
// process, as a debugger or job control would.
TEST(CpuWatch, AProcessStoppedFromOutsideShowsItsStalls) {
  CpuWatch watch;
  std::this_thread::sleep_for(50ms);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls in the child of a threaded process.
    for (int i = 0; i < 3; ++i) {
      ::kill(parent, SIGSTOP);
      timespec stopped{0, 200'000'000}, running{0, 100'000'000};
      ::nanosleep(&stopped, nullptr);
      ::kill(parent, SIGCONT);
      ::nanosleep(&running, nullptr);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::this_thread::sleep_for(50ms);
  const auto j = watch.to_json({{"main", this_thread_id()}});
  // The three stops, each about 200 ms. A busy machine may add a short stall of its own (a few
  // ms of scheduling delay past the 5 ms threshold): those are real, but not the ones made here.
  std::vector<double> long_stalls;
  for (const auto& s : j["stalls"]) {
    const double seconds = 1e-9 * double(s[1].get<int64_t>() - s[0].get<int64_t>());
    if (seconds > 0.1) long_stalls.push_back(seconds);
  }
  ASSERT_EQ(long_stalls.size(), 3u) << j.dump();
  for (const double seconds : long_stalls) EXPECT_NEAR(seconds, 0.2, 0.05) << j.dump();
  EXPECT_GE(j["stall_count"].get<int>(), 3) << j.dump();
  EXPECT_NEAR(j["stalled_seconds"].get<double>(), 0.6, 0.1) << j.dump();
  EXPECT_NEAR(j["longest_stall_seconds"].get<double>(), 0.2, 0.05) << j.dump();
  EXPECT_LT(j["ran_fraction"].get<double>(), 0.6) << j.dump();
  ASSERT_EQ(j["threads"].size(), 1u);
  EXPECT_EQ(j["threads"][0]["lane"], "main");
  EXPECT_GE(j["threads"][0]["voluntary_switches"].get<int64_t>(), 1);
  EXPECT_GE(j["minor_faults"].get<int64_t>(), 1);
}

// An undisturbed process runs all the time (stalls only from machine noise).
TEST(CpuWatch, AnUndisturbedProcessRuns) {
  CpuWatch watch;
  std::this_thread::sleep_for(300ms);
  const auto j = watch.to_json();
  EXPECT_GT(j["ran_fraction"].get<double>(), 0.8) << j.dump();
  EXPECT_GT(j["wall_seconds"].get<double>(), 0.25);
}

TEST(CpuWatch, SnapshotsNameTheThreadsOfTheirLanes) {
  SpanRecorder recorder;
  recorder.name_this_thread("main");
  int reader_tid = 0;
  std::thread reader([&] {
    recorder.name_this_thread("reader 1");
    reader_tid = this_thread_id();
  });
  reader.join();
  recorder.named_lane("allreduce");
  const auto snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.lane_threads.size(), 3u);
  EXPECT_EQ(snapshot.lane_threads[0], std::make_pair(std::string("main"), this_thread_id()));
  EXPECT_EQ(snapshot.lane_threads[1], std::make_pair(std::string("reader 1"), reader_tid));
  EXPECT_EQ(snapshot.lane_threads[2], std::make_pair(std::string("allreduce"), 0));
}

}  // namespace
}  // namespace sluice::timing
