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

// The model FLOPs behind bench_train_step's MFU, counted by hand for a model of unit sizes:
// per sample, encoder 4+2+2, decoder 6+2+2+2 per frame and 2 per token, prenet to stop projection
// 5, postnet 2 x 1 (two layers of kernel 1: mels -> c -> mels); 29 multiply-adds, x 2 x 3.
TEST(TransformerFlops, CountedByHandAndLinearInTheBatch) {
  const TransformerSizes unit{1, 1, 1, 1, 1, 1, 1, 1, 2};
  EXPECT_DOUBLE_EQ(transformer_training_flops(unit, 1, 1, 1, 1), 174.0);
  EXPECT_DOUBLE_EQ(transformer_training_flops(unit, 8, 1, 1, 1), 8 * 174.0);
  // The sizes grow as their tables say: base costs more than small, small more than tiny.
  const auto flops = [](const char* size) { return transformer_training_flops(transformer_sizes(size), 32, 160, 800, 80); };
  EXPECT_LT(flops("tiny"), flops("small"));
  EXPECT_LT(flops("small"), flops("base"));
  // base on 32 x 800 frames x 160 tokens: about 5.7 TFLOP a step.
  EXPECT_NEAR(flops("base") / 1e12, 5.7, 0.1);
}

}  // namespace
}  // namespace sluice::model
