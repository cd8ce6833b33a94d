// The prep job's typed pieces without MPI: PrepSettings read once from the one schema, and
// PrepRankResult's wire form, which rank 0 reads back and prep-report.json keeps.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "runtime/prep/prep_settings.h"
#include "runtime/prep/rank_result.h"
#include "runtime/settings.h"

namespace sluice::runtime {
namespace {

using config::Config;

TEST(PrepSettings, ReadsEverySettingTheJobUsesOnce) {
  const Config config = Config::load(settings_schema(), "",
                                     {"cache.dir=/tmp/some-cache", "runtime.timeout_s=7", "prep.progress_interval_s=0.5",
                                      "prep.overwrite=true", "cache.shard_size=16", "prep.threads=3"});
  const PrepSettings settings = PrepSettings::read(config);
  EXPECT_EQ(settings.cache_dir, "/tmp/some-cache");
  EXPECT_EQ(settings.build.cache_dir, "/tmp/some-cache");
  EXPECT_DOUBLE_EQ(settings.timeout_s, 7);
  EXPECT_DOUBLE_EQ(settings.progress_interval_s, 0.5);
  EXPECT_TRUE(settings.overwrite);
  EXPECT_EQ(settings.shard_size, 16);
  EXPECT_EQ(settings.threads, 3);
  // What the cache records: the output settings without the paths.
  EXPECT_EQ(settings.output, output_settings(config));
  EXPECT_FALSE(settings.output["cache"].contains("dir"));
}

TEST(PrepSettings, MinimumDurationAtOrAboveTheMaximumIsAConfigError) {
  const Config config = Config::load(settings_schema(), "", {"prep.min_seconds=5", "prep.max_seconds=5"});
  EXPECT_THROW(PrepSettings::read(config), ConfigError);
}

TEST(PrepRankResult, TheWireFormReadsBackToTheSameResult) {
  BuildResult built;
  built.shards = {{3, true, 8, 0}, {7, false, 6, 2}};
  built.samples = 14;
  built.rejects = 2;
  built.frames = 12345;
  built.audio_seconds = 42.5;
  built.reject_reasons = {{"too_long", 2}};
  built.unknown = {{U'\u00e9', 3}};
  built.stages = {1.5, 0.25, 2.0, 0.75};
  built.cpu = {3.25, 0.5};
  built.wall_seconds = 9.5;
  built.error = std::make_exception_ptr(EnvironmentError("no space left on the device"));
  const PrepRankResult result = PrepRankResult::from_build(built, 4, "node07");
  EXPECT_FALSE(result.ok);
  EXPECT_TRUE(result.environment_error);
  EXPECT_EQ(result.shards_kept, 1);

  const nlohmann::json wire = nlohmann::json::parse(result.to_json().dump());
  EXPECT_EQ(wire["error_kind"], "environment");
  EXPECT_EQ(wire["shards"], nlohmann::json::parse("[[3,true,8,0],[7,false,6,2]]"));
  EXPECT_EQ(wire["unknown"], nlohmann::json::parse(R"({"233": 3})"));
  const PrepRankResult back = PrepRankResult::from_json(wire);
  EXPECT_EQ(back.to_json(), result.to_json());
  EXPECT_EQ(back.rank, 4);
  EXPECT_EQ(back.host, "node07");
  EXPECT_EQ(back.error, result.error);
  EXPECT_EQ(back.unknown, built.unknown);
  EXPECT_DOUBLE_EQ(back.stages.write, 0.75);
  EXPECT_DOUBLE_EQ(back.cpu.workers, 3.25);
  EXPECT_DOUBLE_EQ(back.cpu.writer, 0.5);
}

TEST(PrepRankResult, ASuccessHasNoErrorKind) {
  const PrepRankResult result = PrepRankResult::from_build(BuildResult{}, 0, "h");
  EXPECT_TRUE(result.ok);
  EXPECT_EQ(result.to_json()["error_kind"], "");
  EXPECT_EQ(result.to_json()["error"], "");
}

}  // namespace
}  // namespace sluice::runtime
