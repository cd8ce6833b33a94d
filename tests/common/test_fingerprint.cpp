#include <gtest/gtest.h>

#include "common/fingerprint.h"

namespace sluice {
namespace {

std::string of(std::initializer_list<std::pair<const char*, const char*>> fields) {
  Fingerprint fingerprint;
  for (const auto& [label, value] : fields) fingerprint.add(label, value);
  return fingerprint.hex();
}

TEST(Fingerprint, StableAndSensitive) {
  const std::string base = of({{"a", "1"}, {"b", "2"}});
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base, of({{"a", "1"}, {"b", "2"}}));
  EXPECT_NE(base, of({{"a", "1"}, {"b", "3"}}));
  EXPECT_NE(base, of({{"b", "2"}, {"a", "1"}}));
  // Field boundaries are part of the hash: moving a byte across them changes it.
  EXPECT_NE(of({{"ab", "c"}}), of({{"a", "bc"}}));
  EXPECT_NE(of({{"x", "ab"}, {"y", ""}}), of({{"x", "a"}, {"y", "b"}}));
}

TEST(Fingerprint, IntegersAndXxh64) {
  Fingerprint one, two;
  one.add("n", int64_t{1});
  two.add("n", int64_t{2});
  EXPECT_NE(one.hex(), two.hex());
  // XXH64 of the empty string with seed 0 is a published constant.
  EXPECT_EQ(xxh64_hex(""), "ef46db3751d8e999");
}

}  // namespace
}  // namespace sluice
