#pragma once
// A count a run printed ("113 samples (0 carried in ...", "2 samples deferred past the run's
// end"): the first number the regex `pattern` captures in `output`, -1 (and a test failure naming
// the pattern) when it is not there. For the tests that audit every sample against the plan.
#include <cstdint>
#include <regex>
#include <string>

#include <gtest/gtest.h>

namespace sluice::test {

inline int64_t printed(const std::string& output, const std::string& pattern) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(output, match, std::regex(pattern))) << pattern << " not in:\n" << output;
  return match.empty() ? -1 : std::stoll(match[1]);
}

}  // namespace sluice::test
