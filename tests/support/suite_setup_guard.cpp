// Linked into every test executable (tests/CMakeLists.txt): a fixture whose SetUpTestSuite fails
// (a prep that did not finish, a binary that is missing) makes gtest skip the suite's tests and
// print "[  SKIPPED ]" for each, which gtest_discover_tests' SKIP_REGULAR_EXPRESSION turns into
// a CTest skip: a broken setup would pass CI as skipped tests. This listener ends the process
// with exit 1 at the first test of such a suite, before that line is printed, so CTest counts the
// test as failed. A suite that skips on purpose (GTEST_SKIP in SetUpTestSuite) is not a failure
// and still skips.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

class SuiteSetupGuard : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& test) override {
    const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    if (suite == nullptr || !suite->ad_hoc_test_result().Failed()) return;
    std::printf("\n[  FAILED  ] %s.%s: the suite's SetUpTestSuite failed (above), so the test cannot run: "
                "a failure, not a skip\n",
                suite->name(), test.name());
    std::fflush(stdout);
    std::_Exit(1);
  }
};

// Appended after gtest's own printer, so its "[ RUN      ]" line comes first.
const bool installed = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SuiteSetupGuard);
  return true;
}();

}  // namespace
