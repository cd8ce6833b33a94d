// cache.mel_dtype: float16 end to end, on the real sample corpus: `sluice prep` writes the same
// corpus twice (float32, float16), `sluice cache verify` passes the float16 cache, h5py
// (tests/cache/compare_mels.py) reads its mels as float16 and finds each within the documented
// error of the float32 cache's (relative 2^-11 = 4.9e-4), the cache is about half the bytes,
// `sluice train` trains on it, and refuses a cache.mel_dtype the cache was not prepared with.
#include <filesystem>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/command.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

int64_t bytes_of(const fs::path& dir) {
  int64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".h5") bytes += static_cast<int64_t>(entry.file_size());
  }
  return bytes;
}

TEST(Float16Cache, PrepVerifyReadAndTrainWithinTheDocumentedError) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const fs::path full = test::scratch_dir("float16-test", "float32");
  const fs::path half = test::scratch_dir("float16-test", "float16");
  const std::string prep = std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out ";
  auto made = test::run_command(prep + full.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  made = test::run_command(prep + half.string() + " --set cache.mel_dtype=float16");
  ASSERT_EQ(made.exit_code, 0) << made.output;

  const auto verified = test::run_command(std::string(SLUICE_BINARY) + " cache verify " + half.string());
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_NE(verified.output.find("0 fault(s)"), std::string::npos) << verified.output;

  const double ratio = static_cast<double>(bytes_of(half)) / static_cast<double>(bytes_of(full));
  EXPECT_GT(ratio, 0.45);
  EXPECT_LT(ratio, 0.6);

  const auto compared = test::run_command(std::string(SLUICE_SYSTEM_PYTHON) + " " + SLUICE_SOURCE_DIR +
                                          "/tests/cache/compare_mels.py " + full.string() + " " + half.string());
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_NE(compared.output.find("dtype float16"), std::string::npos) << compared.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(compared.output, match, std::regex(R"(max relative error ([0-9.e+-]+))")))
      << compared.output;
  const double relative = std::stod(match[1]);
  EXPECT_LE(relative, 4.8829e-4) << compared.output;  // 2^-11: round to nearest
  EXPECT_GT(relative, 1e-5) << "the float16 cache holds the float32 values: nothing was rounded";

  const fs::path run_dir = test::scratch_dir("float16-test", "run");
  const auto trained = test::run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 " +
                                         SLUICE_BINARY + " train --cache " + half.string() + " --run-dir " +
                                         run_dir.string() +
                                         " --steps 3 --set train.batch_size=2 --set train.validation_every=0"
                                         " --set runtime.timeout_s=60");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("step 3/3"), std::string::npos) << trained.output;

  // Train takes the dtype from the cache: asking for the other one is a mismatch, also for a
  // float32 cache, whose recorded settings leave the key out.
  const auto refused = test::run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 2 " +
                                         SLUICE_BINARY + " train --cache " + full.string() + " --run-dir " +
                                         test::scratch_dir("float16-test", "refused").string() +
                                         " --steps 1 --set cache.mel_dtype=float16");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("cache.mel_dtype: \"float16\" (--set) but the cache was prepared with \"float32\""),
            std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace sluice
