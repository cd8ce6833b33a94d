// Linked into every test executable (tests/CMakeLists.txt): at the end of a test program, the
// folders that test::scratch_dir made (run directories, caches, an installed copy of sluice) are
// removed when every test passed, and named when one failed, so a failure's files stay for a look.
// KEEP_WORK=1 keeps them either way, as it does for the shell tests (tests/slurm, tests/netns).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "tests/support/command.h"

namespace {

class ScratchCleanup : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unit_test) override {
    sluice::test::ScratchRoots& roots = sluice::test::scratch_roots();
    const std::lock_guard<std::mutex> lock(roots.mutex);
    const bool keep = !unit_test.Passed() || std::getenv("KEEP_WORK") != nullptr;
    for (const auto& root : roots.paths) {
      if (keep) {
        std::printf("[ scratch  ] kept %s\n", root.c_str());
        continue;
      }
      std::error_code ignored;  // a file still held open elsewhere is not this test's failure
      std::filesystem::remove_all(root, ignored);
    }
    std::fflush(stdout);
  }
};

const bool installed = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchCleanup);
  return true;
}();

}  // namespace
