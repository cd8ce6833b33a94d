#include "model/model_config.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace sluice::model {
namespace {

TEST(LearningRate, LinearWarmupThenInverseSqrt) {
  OptimizerConfig config;
  config.lr = 2e-3;
  config.warmup_steps = 4;
  config.decay = "inverse_sqrt";
  EXPECT_DOUBLE_EQ(learning_rate(config, 1), 0.5e-3);
  EXPECT_DOUBLE_EQ(learning_rate(config, 2), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(config, 4), 2e-3);
  EXPECT_DOUBLE_EQ(learning_rate(config, 16), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(config, 64), 0.5e-3);
}

TEST(LearningRate, InverseSqrtWithoutWarmupStartsAtPeak) {
  OptimizerConfig config;
  config.lr = 1.0;
  config.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(config, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(config, 4), 0.5);
}

TEST(LearningRate, CosineReachesFloorAtTotalSteps) {
  OptimizerConfig config;
  config.lr = 1.0;
  config.warmup_steps = 10;
  config.decay = "cosine";
  config.total_steps = 110;
  config.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(config, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(config, 10), 1.0);
  EXPECT_NEAR(learning_rate(config, 60), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(config, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(config, 1000), 0.1, 1e-12);
}

TEST(LearningRate, ConstantAfterWarmup) {
  OptimizerConfig config;
  config.lr = 3e-4;
  config.warmup_steps = 3;
  config.decay = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(config, 3), 3e-4);
  EXPECT_DOUBLE_EQ(learning_rate(config, 300), 3e-4);
}

template <class Config>
std::string config_error(const Config& config) {
  try {
    validate(config);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfigValidation, DefaultsAreValid) {
  EXPECT_EQ(config_error(ModelConfig{}), "");
  EXPECT_EQ(config_error(OptimizerConfig{}), "");
}

TEST(ModelConfigValidation, ErrorsNameTheKey) {
  ModelConfig model;
  model.size = "huge";
  EXPECT_NE(config_error(model).find("model.size 'huge'"), std::string::npos);
  model = ModelConfig{};
  model.kind = "torchscript";
  EXPECT_NE(config_error(model).find("model.torchscript_path"), std::string::npos);
  model = ModelConfig{};
  model.bf16_autocast = true;
  EXPECT_NE(config_error(model).find("model.bf16_autocast"), std::string::npos);
  model = ModelConfig{};
  model.device = "tpu";
  EXPECT_NE(config_error(model).find("model.device"), std::string::npos);

  OptimizerConfig optimizer;
  optimizer.accumulation_steps = 0;
  EXPECT_NE(config_error(optimizer).find("optimizer.accumulation_steps"), std::string::npos);
  optimizer = OptimizerConfig{};
  optimizer.decay = "cosine";
  EXPECT_NE(config_error(optimizer).find("optimizer.total_steps"), std::string::npos);
  optimizer = OptimizerConfig{};
  optimizer.decay = "linear";
  EXPECT_NE(config_error(optimizer).find("optimizer.decay 'linear'"), std::string::npos);
}

}  // namespace
}  // namespace sluice::model
