// The transport benchmark's core (benchmark/transport_bench.h, behind `sluice bench transport` and
// bench_transport) on one rank and under `mpirun -np 2`, at one small size: the host table has
// every column with numbers where the ranks allow them, and the GPU table either says in one line
// why it is skipped (no CUDA in the build, no device, --gpu off) or, on a GPU machine, has a row
// with numbers. Asserts on what is printed and returned, never on a time.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/measure/transport_bench.h"
#include "common/mpi_session.h"
#include "runtime/transport/gpu_facts.h"
#include "tests/support/mpi_gtest.h"

namespace sluice::benchmark {
namespace {

MpiSession* session = nullptr;

TransportBenchOptions one_small_size(GpuColumns gpu) {
  TransportBenchOptions options;
  options.min_bytes = 64 * 1024;
  options.max_bytes = 64 * 1024;
  options.rounds = 1;
  options.bytes_per_point = 1;  // the fewest batches a measurement takes (20)
  options.gpu_bytes_per_point = 1;
  options.gpu = gpu;
  return options;
}

// Runs the benchmark on every rank; returns what this rank printed (the tables: rank 0).
std::string run(const TransportBenchOptions& options, int* code) {
  ::testing::internal::CaptureStdout();
  try {
    *code = run_transport_bench(*session, options);
  } catch (const std::exception& error) {
    std::fflush(stdout);
    const std::string text = ::testing::internal::GetCapturedStdout();
    ADD_FAILURE() << "run_transport_bench threw: " << error.what() << "\nafter printing:\n" << text;
    return text;
  }
  std::fflush(stdout);
  return ::testing::internal::GetCapturedStdout();
}

// Empty when every rank of this test sees a CUDA device in a CUDA build, else why not.
std::string no_gpu_reason() {
  const transport::GpuEnvironment env = transport::gpu_environment();
  if (!env.cuda_compiled) return "this build has no CUDA";
  if (env.gpus.empty()) return "no CUDA device visible: " + env.problem;
  return "";
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> result;
  for (std::string word; in >> word;) result.push_back(word);
  return result;
}

// The first table row in `text` (after `from`) whose size column is `size`.
std::vector<std::string> row(const std::string& text, const std::string& size, size_t from = 0) {
  std::istringstream in(text.substr(from));
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> w = words(line);
    if (!w.empty() && w[0] == size) return w;
  }
  return {};
}

// Columns [first, last] of `w` are positive numbers.
void expect_numbers(const std::vector<std::string>& w, size_t first, size_t last, const std::string& text) {
  ASSERT_GT(w.size(), last) << text;
  for (size_t i = first; i <= last; ++i) EXPECT_GT(std::stod(w[i]), 0.0) << "column " << i << " in\n" << text;
}

// A host-table column group at `at` (us, GB/s[, ratio]) for 64 KiB batches: a positive time, the
// bandwidth that time gives, and the ratio to memcpy's bandwidth, each within its print rounding
// (1 decimal for us, 2 for GB/s and ratio). Under load a ratio may print as 0.00: values are
// checked against each other, not against zero.
void expect_column_group(const std::vector<std::string>& w, size_t at, bool with_ratio, const std::string& text) {
  ASSERT_GT(w.size(), at + (with_ratio ? 2 : 1)) << text;
  const double us = std::stod(w[at]), gbps = std::stod(w[at + 1]);
  EXPECT_GT(us, 0.0) << "column " << at << " in\n" << text;
  const double bytes = 64 * 1024;
  const double fastest = bytes / (std::max(us - 0.05, 1e-3) * 1e3), slowest = bytes / ((us + 0.05) * 1e3);
  EXPECT_GE(gbps, slowest - 0.005) << "column " << at + 1 << " in\n" << text;
  EXPECT_LE(gbps, fastest + 0.005) << "column " << at + 1 << " in\n" << text;
  if (!with_ratio) return;
  const double memcpy_gbps = std::stod(w[3]);
  EXPECT_NEAR(std::stod(w[at + 2]), gbps / memcpy_gbps, 0.006 + 0.01 * gbps / memcpy_gbps)
      << "column " << at + 2 << " in\n" << text;
}

TEST(TransportBench, HostTableHasEveryColumnAndGpuOffSaysSo) {
  int code = -1;
  const std::string text = run(one_small_size(GpuColumns::off), &code);
  EXPECT_EQ(code, 0);
  if (session->rank() != 0) return;
  for (const char* column : {"memcpy_us", "inproc_us", "mpi_us", "raw_us"}) {
    EXPECT_NE(text.find(column), std::string::npos) << column << " missing in\n" << text;
  }
  const std::vector<std::string> w = row(text, "64K");
  ASSERT_EQ(w.size(), 13u) << text;  // size, count, memcpy (us, GB/s), 3 x (us, GB/s, ratio)
  EXPECT_EQ(w[1], "20");
  expect_column_group(w, 2, false, text);  // memcpy
  expect_column_group(w, 4, true, text);   // inproc
  if (session->size() == 2) {
    expect_column_group(w, 7, true, text);   // mpi
    expect_column_group(w, 10, true, text);  // raw MPI
  } else {
    for (size_t i = 7; i < 13; ++i) EXPECT_EQ(w[i], "-") << text;
  }
  EXPECT_NE(text.find("\n# GPU columns skipped: --gpu off\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("# GPU table"), std::string::npos) << text;
}

TEST(TransportBench, WithoutAGpuOneLineSaysWhyTheGpuColumnsAreSkipped) {
  const std::string reason = no_gpu_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is visible: the GPU table is measured (see OnAGpu...)";
  int code = -1;
  const std::string text = run(one_small_size(GpuColumns::automatic), &code);
  EXPECT_EQ(code, 0);
  if (session->rank() != 0) return;
  EXPECT_EQ(row(text, "64K").size(), 13u) << "the host table still comes first:\n" << text;
  const size_t line = text.find("\n# GPU columns skipped: ");
  ASSERT_NE(line, std::string::npos) << text;
  const std::string why = text.substr(line + 1, text.find('\n', line + 1) - line - 1);
  if (!transport::gpu_environment().cuda_compiled) {
    EXPECT_NE(why.find("this build has no CUDA"), std::string::npos) << why;
  } else {
    EXPECT_NE(why.find("no CUDA device visible on rank 0"), std::string::npos) << why;
    EXPECT_NE(why.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << why;
  }
  EXPECT_EQ(text.find("# GPU table"), std::string::npos) << text;
}

TEST(TransportBench, GpuOnWithoutAGpuFailsAndSaysWhy) {
  if (no_gpu_reason().empty()) GTEST_SKIP() << "a CUDA device is visible";
  int code = -1;
  const std::string text = run(one_small_size(GpuColumns::on), &code);
  EXPECT_EQ(code, 1);
  if (session->rank() != 0) return;
  EXPECT_NE(text.find("\n# GPU columns skipped: "), std::string::npos) << text;
}

// GPU machines only (ctest label gpu): d2d, nccl_self and nccl on one rank, cuda_ipc with two.
TEST(TransportBench, OnAGpuTheGpuTableHasARowOfNumbers) {
  const std::string reason = no_gpu_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  int code = -1;
  const std::string text = run(one_small_size(GpuColumns::on), &code);
  EXPECT_EQ(code, 0) << text;
  if (session->rank() != 0) return;
  const size_t table = text.find("# GPU table: rank 0 on CUDA device ");
  ASSERT_NE(table, std::string::npos) << text;
  const std::vector<std::string> w = row(text, "64K", table);
  ASSERT_EQ(w.size(), 12u) << text;  // size, count, d2d (us, GB/s), nccl_self, nccl (+ ratio), cuda_ipc (+ ratio)
  expect_numbers(w, 1, 3, text);
  if (transport::gpu_environment().nccl_compiled) expect_numbers(w, 4, 8, text);
  if (session->size() == 2) {
    expect_numbers(w, 9, 11, text);
  } else {
    EXPECT_EQ(w[9], "-") << text;
  }
}

}  // namespace
}  // namespace sluice::benchmark

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::benchmark::session = s; });
}
