// GPU paths of the Trainer (CTest label `gpu`): bf16 autocast, CUDA dropout seeding, pinned-host
// staging of reducer buckets, batches already on the device. Skipped where torch sees no CUDA
// device. No torch here: device buffers come from the CUDA runtime when it is linked.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#ifdef SLUICE_MODEL_TEST_CUDART
#include <cuda_runtime.h>
#endif

#include "common/error.h"
#include "model/device_feature_transform.h"
#include "model/loopback_reducer.h"
#include "model/trainer.h"
#include "model_test_util.h"

namespace sluice::model {
namespace {

namespace fs = std::filesystem;
using testing::HostBatch;
using testing::make_batch;
constexpr int kMels = 80;
constexpr int kVocab = 60;

ModelConfig cuda_model(bool bf16 = false) {
  ModelConfig config = testing::tiny_model(kMels, kVocab);
  config.device = "cuda:0";
  config.bf16_autocast = bf16;
  return config;
}

// The trainer, or null when this machine has no usable CUDA device.
std::unique_ptr<Trainer> cuda_trainer(const ModelConfig& config, const OptimizerConfig& optimizer, uint64_t seed,
                                      GradientReducer* reducer = nullptr) {
  try {
    return std::make_unique<Trainer>(config, optimizer, seed, reducer);
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find("no CUDA device") != std::string::npos) return nullptr;
    throw;
  }
}

#define CUDA_TRAINER_OR_SKIP(name, ...)              \
  auto name = cuda_trainer(__VA_ARGS__);             \
  if (!name) GTEST_SKIP() << "no CUDA device visible"

float relative_difference(double a, double b) { return static_cast<float>(std::fabs(a - b) / std::fabs(b)); }

TEST(ModelGpu, Bf16AutocastTrains) {
  CUDA_TRAINER_OR_SKIP(trainer, cuda_model(/*bf16=*/true), testing::constant_lr(1e-3), 1);
  EXPECT_NE(trainer->describe().find("bf16"), std::string::npos);
  const HostBatch batch = make_batch(8, 40, 200, kMels, kVocab, 1);
  StepResult first, last;
  for (int step = 0; step < 30; ++step) {
    const StepResult r = trainer->train_step(batch.view());
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << step;
    ASSERT_FALSE(r.nonfinite_gradient) << "step " << step;
    if (step == 0) first = r;
    last = r;
  }
  std::printf("[ bf16 ] loss %.4f -> %.4f, last step %.4f s\n", first.loss, last.loss,
              last.forward_s + last.backward_s + last.optimizer_s);
  EXPECT_LT(last.loss, 0.6 * first.loss);
}

// Weights are initialised on the CPU generator and then moved, so CPU and CUDA trainers with one
// seed start equal; their fp32 losses agree up to kernel rounding (cuDNN may use TF32 for convs).
TEST(ModelGpu, CudaAgreesWithCpu) {
  ModelConfig config = cuda_model();
  config.dropout = 0.0;
  config.prenet_dropout = 0.0;
  CUDA_TRAINER_OR_SKIP(gpu, config, testing::constant_lr(), 3);
  config.device = "cpu";
  Trainer cpu(config, testing::constant_lr(), 3);
  EXPECT_EQ(gpu->parameters_snapshot(), cpu.parameters_snapshot());
  const HostBatch batch = make_batch(4, 20, 100, kMels, kVocab, 2);
  EXPECT_LT(relative_difference(gpu->validation_loss(batch.view()), cpu.validation_loss(batch.view())), 1e-2f);
  for (int step = 0; step < 3; ++step) {
    EXPECT_LT(relative_difference(gpu->train_step(batch.view()).loss, cpu.train_step(batch.view()).loss), 1e-2f);
  }
}

// Buckets staged through pinned host memory for a host-memory reducer give the local update.
TEST(ModelGpu, StagedBucketReductionMatchesLocal) {
  OptimizerConfig optimizer = testing::constant_lr(0.1);
  optimizer.eps = 1.0;  // update follows the gradient, not its sign (see trainer_test.cpp)
  LoopbackReducer reducer(2, 256 * 1024);
  CUDA_TRAINER_OR_SKIP(local, cuda_model(), optimizer, 4);
  CUDA_TRAINER_OR_SKIP(reduced, cuda_model(), optimizer, 4, &reducer);
  const HostBatch batch = make_batch(4, 20, 100, kMels, kVocab, 3);
  const std::vector<float> initial = local->parameters_snapshot();
  for (int step = 0; step < 3; ++step) {
    const StepResult a = local->train_step(batch.view());
    const StepResult b = reduced->train_step(batch.view());
    EXPECT_LT(relative_difference(b.loss, a.loss), 1e-4f);
  }
  const std::vector<float> after = local->parameters_snapshot();
  EXPECT_LT(testing::max_abs_difference(after, reduced->parameters_snapshot()),
            1e-3f * testing::max_abs_difference(initial, after));
  EXPECT_EQ(reducer.wait_all_calls(), 3);
}

// Resume on CUDA: dropout masks come from the reseeded CUDA generator; gradients may differ in
// the last bits (atomic adds in some backward kernels), so the comparison has a tolerance.
TEST(ModelGpu, CheckpointResumesOnCuda) {
  CUDA_TRAINER_OR_SKIP(original, cuda_model(), testing::constant_lr(), 7);
  std::vector<HostBatch> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(make_batch(4, 20, 100, kMels, kVocab, 10 + i));
  original->train_step(batches[0].view());
  original->train_step(batches[1].view());
  const fs::path path = fs::temp_directory_path() / "sluice-model-gpu-resume.ckpt";
  original->save_checkpoint(path, {{"step", 2}});
  const double expected_2 = original->train_step(batches[2].view()).loss;
  const double expected_3 = original->train_step(batches[3].view()).loss;
  CUDA_TRAINER_OR_SKIP(resumed, cuda_model(), testing::constant_lr(), 8);
  EXPECT_EQ(resumed->load_checkpoint(path)["step"], 2);
  EXPECT_LT(relative_difference(resumed->train_step(batches[2].view()).loss, expected_2), 1e-4f);
  EXPECT_LT(relative_difference(resumed->train_step(batches[3].view()).loss, expected_3), 1e-4f);
  fs::remove(path);
}

#ifdef SLUICE_MODEL_TEST_CUDART
// A batch already in device memory (on_device) gives the same loss as the host copy.
TEST(ModelGpu, DeviceBatchMatchesHostBatch) {
  CUDA_TRAINER_OR_SKIP(trainer, cuda_model(), testing::constant_lr(), 5);
  const HostBatch host = make_batch(4, 20, 100, kMels, kVocab, 4);
  auto to_device = [](const auto& values) {
    void* pointer = nullptr;
    const size_t bytes = values.size() * sizeof(values[0]);
    EXPECT_EQ(cudaMalloc(&pointer, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(pointer, values.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return pointer;
  };
  void* tokens = to_device(host.tokens);
  void* token_lens = to_device(host.token_lens);
  void* mels = to_device(host.mels);
  void* mel_lens = to_device(host.mel_lens);
  BatchView device = host.view();
  device.tokens = static_cast<const int32_t*>(tokens);
  device.token_lens = static_cast<const int32_t*>(token_lens);
  device.mels = static_cast<const float*>(mels);
  device.mel_lens = static_cast<const int32_t*>(mel_lens);
  device.on_device = true;
  EXPECT_EQ(trainer->validation_loss(device), trainer->validation_loss(host.view()));
  EXPECT_TRUE(trainer->train_step(device).optimizer_stepped);
  for (void* pointer : {tokens, token_lens, mels, mel_lens}) cudaFree(pointer);
}

// The data rank's GPU feature work gives what the CPU path gives: same masks, same normalisation.
TEST(ModelGpu, FeatureTransformOnCudaMatchesCpu) {
  FeatureTransformSettings settings;
  for (int m = 0; m < kMels; ++m) {
    settings.mean.push_back(-5.0f + 0.05f * static_cast<float>(m));
    settings.stddev.push_back(1.5f + 0.01f * static_cast<float>(m));
  }
  settings.masking = {2, 30, 2, 8};
  settings.seed = 31;
  std::unique_ptr<FeatureTransform> on_gpu;
  try {
    on_gpu = make_feature_transform(settings, "cuda:0");
  } catch (const ConfigError& error) {
    GTEST_SKIP() << error.what();
  }
  HostBatch host = make_batch(6, 20, 120, kMels, kVocab, 9);
  const std::vector<int64_t> indices{3, 1, 4, 1, 5, 9};
  std::vector<float> on_cpu = host.mels;
  const MelBatchRef cpu_ref{on_cpu.data(), host.mel_lens.data(), indices.data(), 6, 120, kMels};
  FeatureTransform(settings, "cpu").apply(cpu_ref, 77, true);

  float* device = nullptr;
  const size_t bytes = host.mels.size() * sizeof(float);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.mels.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  on_gpu->apply({device, host.mel_lens.data(), indices.data(), 6, 120, kMels}, 77, true);
  std::vector<float> back(host.mels.size());
  ASSERT_EQ(cudaMemcpy(back.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  float worst = 0;
  size_t zeros_cpu = 0, zeros_gpu = 0;
  for (size_t i = 0; i < back.size(); ++i) {
    worst = std::max(worst, std::fabs(back[i] - on_cpu[i]));
    zeros_cpu += on_cpu[i] == 0.0f ? 1 : 0;
    zeros_gpu += back[i] == 0.0f ? 1 : 0;
  }
  EXPECT_LT(worst, 1e-5f);
  EXPECT_EQ(zeros_gpu, zeros_cpu);  // the same frames and bins masked
}
#endif

}  // namespace
}  // namespace sluice::model
