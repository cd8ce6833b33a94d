// A test program whose shared setup fails, for the test of tests/support/suite_setup_guard.cpp
// (tests/common/CMakeLists.txt): its one test must end as a failure (exit 1, no "[  SKIPPED ]"
// line, which CTest would count as a skip), and its other suite, whose setup is sound, must pass.
#include <gtest/gtest.h>

namespace {

class BrokenSetup : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FAIL() << "the shared setup failed (on purpose)"; }
};

TEST_F(BrokenSetup, NeverRuns) { ADD_FAILURE() << "the guard should have ended the process before this test"; }

TEST(SoundSetup, Runs) { EXPECT_EQ(2 + 2, 4); }

}  // namespace
