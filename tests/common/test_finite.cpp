// first_non_finite (common/finite.h): the index of the first NaN or infinity, wherever it lies
// relative to the 4-float SIMD steps and the scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/finite.h"

namespace {

using sluice::first_non_finite;

TEST(FirstNonFinite, AllFiniteGivesTheLengthIncludingExtremes) {
  std::vector<float> values = {0.0f, -0.0f, 1e-45f, std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::lowest(), -11.5f, 3.0f};
  EXPECT_EQ(first_non_finite(values.data(), static_cast<int64_t>(values.size())), 7);
  EXPECT_EQ(first_non_finite(values.data(), 0), 0);
}

TEST(FirstNonFinite, FindsTheFirstSpecialValueAtEveryPosition) {
  const float specials[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (const float special : specials) {
    for (int64_t n : {1, 3, 4, 5, 8, 13}) {
      for (int64_t at = 0; at < n; ++at) {
        std::vector<float> values(static_cast<size_t>(n), 0.5f);
        values[static_cast<size_t>(at)] = special;
        if (at + 1 < n) values[static_cast<size_t>(n - 1)] = special;  // a later one does not hide it
        EXPECT_EQ(first_non_finite(values.data(), n), at) << "n " << n << " special " << special;
      }
    }
  }
}

}  // namespace
