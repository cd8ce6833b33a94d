#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "common/text_match.h"

namespace sluice::config {
namespace {

Schema test_schema() {
  Schema schema;
  schema.add({"features.n_mels", ValueType::integer, "80", "mel bands", {}, 1, 1024});
  schema.add({"features.f_max", ValueType::number, "8000", "highest frequency", {}, 1, 1e6});
  schema.add({"features.mel_scale", ValueType::string, "slaney", "mel scale", {"slaney", "htk"}});
  schema.add({"prep.overwrite", ValueType::boolean, "false", "replace"});
  schema.add({"cache.dir", ValueType::string, "out/cache", "where"});
  return schema;
}

std::filesystem::path write_yaml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(Config, DefaultsApplyWithoutAFile) {
  const Schema schema = test_schema();
  const Config config = Config::load(schema, "", {});
  EXPECT_EQ(config.integer("features.n_mels"), 80);
  EXPECT_DOUBLE_EQ(config.number("features.f_max"), 8000.0);
  EXPECT_EQ(config.string("features.mel_scale"), "slaney");
  EXPECT_FALSE(config.boolean("prep.overwrite"));
  EXPECT_EQ(config.origin("features.n_mels"), "default");
}

TEST(Config, FileThenOverridesInOrder) {
  const Schema schema = test_schema();
  const auto path = write_yaml("sluice-config-order.yaml", "features:\n  n_mels: 100\n  mel_scale: htk\n");
  const Config config = Config::load(schema, path, {"features.n_mels=64", "prep.overwrite=true"});
  EXPECT_EQ(config.integer("features.n_mels"), 64);
  EXPECT_EQ(config.origin("features.n_mels"), "--set");
  EXPECT_EQ(config.string("features.mel_scale"), "htk");
  EXPECT_EQ(config.origin("features.mel_scale"), path.string() + ":3");
  EXPECT_TRUE(config.boolean("prep.overwrite"));
}

// A config sent to another process (a Python model rank takes rank 0's) keeps what was given
// apart from the defaults: the check against the cache takes defaults from the cache.
TEST(Config, WireKeepsValuesAndOrigins) {
  const Schema schema = test_schema();
  const auto path = write_yaml("sluice-config-wire.yaml", "features:\n  mel_scale: htk\n");
  const Config sent = Config::load(schema, path, {"features.n_mels=64"});
  const Config received = Config::from_wire(schema, nlohmann::json::parse(sent.to_wire().dump()));
  EXPECT_EQ(received.integer("features.n_mels"), 64);
  EXPECT_EQ(received.origin("features.n_mels"), "--set");
  EXPECT_EQ(received.string("features.mel_scale"), "htk");
  EXPECT_EQ(received.origin("features.mel_scale"), path.string() + ":2");
  EXPECT_EQ(received.origin("features.f_max"), "default");
  EXPECT_EQ(received.to_json(), sent.to_json());
  // What arrives is validated as a file's values are.
  nlohmann::json wire = sent.to_wire();
  wire["features.n_mels"] = {"0", "rank 0"};
  EXPECT_THROW(Config::from_wire(schema, wire), ConfigError);
}

TEST(Config, UnknownKeyNamesFileLineAndCloseMatch) {
  const Schema schema = test_schema();
  const auto path = write_yaml("sluice-config-unknown.yaml", "cache:\n  dir: x\nfeatures:\n  n_mel: 100\n");
  const std::string message = error_of([&] { Config::load(schema, path, {}); });
  EXPECT_NE(message.find(path.string() + ":4"), std::string::npos) << message;
  EXPECT_NE(message.find("unknown key 'features.n_mel'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'features.n_mels'"), std::string::npos) << message;
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  const Schema schema = test_schema();
  const auto path = write_yaml("sluice-config-type.yaml", "features:\n  n_mels: eighty\n");
  const std::string message = error_of([&] { Config::load(schema, path, {}); });
  EXPECT_NE(message.find(path.string() + ":2"), std::string::npos) << message;
  EXPECT_NE(message.find("features.n_mels must be an integer, got 'eighty'"), std::string::npos) << message;
}

// Bounds are written as a person writes them: the stream's default said "[1, 1e+06]" and
// "[0, 1.04858e+06]", and "[0, 1e+300]" for a setting with no upper bound.
TEST(Config, RangeErrorsSpellTheBoundsOut) {
  Schema schema = test_schema();
  schema.add({"train.steps", ValueType::integer, "0", "steps to train", {}, 0});
  schema.add({"train.batch_size", ValueType::integer, "16", "samples per step", {}, 0, 1048576});
  const std::string wide = error_of([&] { Config::load(schema, "", {"features.f_max=2e6"}); });
  EXPECT_NE(wide.find("features.f_max must be in [1, 1000000], got 2e6"), std::string::npos) << wide;
  const std::string large = error_of([&] { Config::load(schema, "", {"train.batch_size=-1"}); });
  EXPECT_NE(large.find("must be in [0, 1048576], got -1"), std::string::npos) << large;
  const std::string open = error_of([&] { Config::load(schema, "", {"train.steps=-5"}); });
  EXPECT_NE(open.find("train.steps must be at least 0, got -5"), std::string::npos) << open;
}

TEST(Config, RangeAndChoicesAreChecked) {
  const Schema schema = test_schema();
  EXPECT_NE(error_of([&] { Config::load(schema, "", {"features.n_mels=0"}); }).find("must be in [1, 1024]"),
            std::string::npos);
  const std::string choice = error_of([&] { Config::load(schema, "", {"features.mel_scale=slany"}); });
  EXPECT_NE(choice.find("must be one of {slaney, htk}"), std::string::npos) << choice;
  EXPECT_NE(choice.find("did you mean 'slaney'"), std::string::npos) << choice;
  EXPECT_NE(error_of([&] { Config::load(schema, "", {"features.nmels=3"}); }).find("features.n_mels"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Config::load(schema, "", {"novalue"}); }).find("expected section.key=value"),
            std::string::npos);
}

TEST(Config, BadYamlNamesTheLine) {
  const Schema schema = test_schema();
  const auto path = write_yaml("sluice-config-bad.yaml", "features:\n  n_mels: [1, 2\n");
  const std::string message = error_of([&] { Config::load(schema, path, {}); });
  EXPECT_NE(message.find(path.string() + ":"), std::string::npos) << message;
  EXPECT_NE(message.find("not valid YAML"), std::string::npos) << message;
}

TEST(Config, EffectiveYamlLoadsBackToTheSameValues) {
  const Schema schema = test_schema();
  const Config config = Config::load(schema, "", {"features.n_mels=64", "cache.dir=/tmp/a b"});
  const auto path = std::filesystem::temp_directory_path() / "sluice-config-effective.yaml";
  config.write(path);
  const Config again = Config::load(schema, path, {});
  EXPECT_EQ(again.to_json(), config.to_json());
  EXPECT_EQ(again.to_json()["cache"]["dir"], "/tmp/a b");
  EXPECT_EQ(again.to_json()["features"]["n_mels"], 64);
}

TEST(Config, ReferenceListsEverySetting) {
  const std::string markdown = test_schema().reference_markdown();
  for (const auto& key : test_schema().keys()) EXPECT_NE(markdown.find("`" + key + "`"), std::string::npos);
  EXPECT_NE(markdown.find("slaney \\| htk"), std::string::npos);
}

TEST(TextMatch, EditDistanceAndClosest) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(closest_match("n_mel", {"n_fft", "n_mels", "hop_length"}), "n_mels");
  EXPECT_EQ(closest_match("completely_else", {"n_fft", "n_mels"}), "");
}

}  // namespace
}  // namespace sluice::config
