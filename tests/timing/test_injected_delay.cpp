#include "timing/injected_delay.h"

#include <chrono>

#include <gtest/gtest.h>

#include "common/error.h"

namespace sluice::timing {
namespace {

TEST(InjectedDelay, OffWithoutAStage) {
  const auto delay = InjectedDelay::parse("", "", 100, 1);
  EXPECT_FALSE(delay.stage.has_value());
  EXPECT_FALSE(delay.applies(Stage::cache_read, 0));
  EXPECT_TRUE(delay.to_json().is_null());
}

TEST(InjectedDelay, AppliesToTheChosenStageAndRanks) {
  const auto delay = InjectedDelay::parse("forward", "1, 3", 5, 1);
  EXPECT_TRUE(delay.applies(Stage::forward, 1));
  EXPECT_TRUE(delay.applies(Stage::forward, 3));
  EXPECT_FALSE(delay.applies(Stage::forward, 2));
  EXPECT_FALSE(delay.applies(Stage::backward, 1));
  EXPECT_EQ(delay.to_json()["ranks"], nlohmann::json({1, 3}));
  // Every rank when none is named.
  EXPECT_TRUE(InjectedDelay::parse("send", "", 5, 1).applies(Stage::send, 17));
}

TEST(InjectedDelay, EveryKthItemSleeps) {
  const auto delay = InjectedDelay::parse("collate", "", 20, 7);
  const auto seconds = [&](int64_t index) {
    const auto start = std::chrono::steady_clock::now();
    delay.apply(Stage::collate, 0, index);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  EXPECT_LT(seconds(0), 0.015);
  EXPECT_LT(seconds(5), 0.015);
  EXPECT_GE(seconds(6), 0.020);  // items 6, 13, 20, ...: the 7th, 14th, 21st
  EXPECT_GE(seconds(13), 0.020);
  EXPECT_LT(seconds(7), 0.015);
}

TEST(InjectedDelay, BadSettingsNameTheSetting) {
  try {
    InjectedDelay::parse("cache_reed", "", 10, 1);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("debug.delay_stage"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("cache_read"), std::string::npos) << error.what();
  }
  EXPECT_THROW(InjectedDelay::parse("send", "zero", 10, 1), ConfigError);
  EXPECT_THROW(InjectedDelay::parse("send", "", 10, 0), ConfigError);
}

}  // namespace
}  // namespace sluice::timing
