// Trainer through its public, torch-free API: losses, masking, overfitting, accumulation,
// bucketed reduction, checkpoints. All on CPU with one compute thread (bit-exact comparisons).
#include "model/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/loopback_reducer.h"
#include "model_test_util.h"

namespace sluice::model {
namespace {

namespace fs = std::filesystem;
using testing::constant_lr;
using testing::HostBatch;
using testing::make_batch;
using testing::max_abs_difference;
using testing::tiny_model;

constexpr int kMels = 16;
constexpr int kVocab = 40;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_compute_threads(1);
    dir_ = fs::temp_directory_path() /
           ("sluice-model-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The built-in architecture's parameter count, from its description in transformer_tts.h.
int64_t expected_parameters(int64_t d, int64_t layers, int64_t ffn, int64_t prenet, int64_t postnet, int64_t vocab,
                            int64_t mels) {
  const int64_t attention = 4 * d * d + 4 * d;
  const int64_t feed_forward = 2 * d * ffn + ffn + d;
  const int64_t encoder_layer = 2 * 2 * d + attention + feed_forward;
  const int64_t decoder_layer = 3 * 2 * d + 2 * attention + feed_forward;
  const int64_t conv = 5;
  return vocab * d + 2 /* alphas */ + layers * (encoder_layer + decoder_layer) + 2 * 2 * d /* final norms */ +
         (mels * prenet + prenet) + (prenet * prenet + prenet) + (prenet * d + d) + (d * mels + mels) + (d + 1) +
         (mels * postnet * conv + postnet) + 3 * (postnet * postnet * conv + postnet) + (postnet * mels * conv + mels);
}

TEST_F(TrainerTest, ParameterCountsMatchTheArchitecture) {
  ModelConfig config;  // defaults: vocab 256, 80 mels
  const struct {
    const char* size;
    int64_t d, layers, ffn, prenet, postnet;
  } sizes[] = {{"tiny", 128, 2, 512, 128, 64}, {"small", 256, 4, 1024, 256, 256}, {"base", 512, 6, 2048, 256, 512}};
  for (const auto& s : sizes) {
    config.size = s.size;
    Trainer trainer(config, OptimizerConfig{}, 1);
    EXPECT_EQ(trainer.parameter_count(), expected_parameters(s.d, s.layers, s.ffn, s.prenet, s.postnet, 256, 80))
        << s.size;
    EXPECT_NE(trainer.describe().find(std::string("transformer ") + s.size), std::string::npos);
    std::printf("[ params ] %s: %lld\n", s.size, static_cast<long long>(trainer.parameter_count()));
  }
}

TEST_F(TrainerTest, SameSeedSameWeights) {
  Trainer a(tiny_model(kMels, kVocab), constant_lr(), 7);
  Trainer b(tiny_model(kMels, kVocab), constant_lr(), 7);
  Trainer c(tiny_model(kMels, kVocab), constant_lr(), 8);
  EXPECT_EQ(a.parameters_snapshot(), b.parameters_snapshot());
  EXPECT_NE(a.parameters_snapshot(), c.parameters_snapshot());
}

TEST_F(TrainerTest, StepReportsLossesAndTimings) {
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(), 1);
  const HostBatch batch = make_batch(3, 9, 24, kMels, kVocab, 1);
  const StepResult r = trainer.train_step(batch.view());
  EXPECT_TRUE(r.optimizer_stepped);
  EXPECT_FALSE(r.nonfinite_gradient);
  EXPECT_EQ(r.optimizer_steps, 1);
  EXPECT_NEAR(r.loss, r.mel_loss + r.postnet_loss + r.stop_loss, 1e-5);
  EXPECT_GT(r.mel_loss, 0.0);
  EXPECT_GT(r.stop_loss, 0.0);
  EXPECT_GT(r.grad_norm, 0.0);
  EXPECT_DOUBLE_EQ(r.lr, 1e-3);
  EXPECT_GT(r.forward_s, 0.0);
  EXPECT_GT(r.backward_s, 0.0);
  EXPECT_GT(r.optimizer_s, 0.0);
  EXPECT_EQ(r.allreduce_exposed_s, 0.0);
  EXPECT_EQ(trainer.micro_steps(), 1);
}

// Garbage past the lengths (NaN, huge values, ids outside the vocabulary) changes nothing: not
// the validation loss, not the training loss, not the update.
TEST_F(TrainerTest, PaddingDoesNotChangeTheLoss) {
  const HostBatch clean = make_batch(4, 10, 30, kMels, kVocab, 3);
  HostBatch dirty = clean;
  for (int b = 0; b < dirty.batch_size; ++b) {
    for (int t = dirty.token_lens[b]; t < dirty.max_tokens; ++t) dirty.token(b, t) = 100000 + t;
    for (int f = dirty.mel_lens[b]; f < dirty.max_frames; ++f) {
      for (int m = 0; m < kMels; ++m) {
        dirty.mel(b, f, m) = (f + m) % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : 1e6f * (m + 1);
      }
    }
  }
  ASSERT_LT(clean.mel_lens[1], clean.max_frames);  // there is padding to poison

  Trainer a(tiny_model(kMels, kVocab), constant_lr(), 5);
  Trainer b(tiny_model(kMels, kVocab), constant_lr(), 5);
  EXPECT_EQ(a.validation_loss(clean.view()), b.validation_loss(dirty.view()));
  const StepResult ra = a.train_step(clean.view());
  const StepResult rb = b.train_step(dirty.view());
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_EQ(ra.mel_loss, rb.mel_loss);
  EXPECT_EQ(ra.postnet_loss, rb.postnet_loss);
  EXPECT_EQ(ra.stop_loss, rb.stop_loss);
  EXPECT_EQ(ra.grad_norm, rb.grad_norm);
  EXPECT_EQ(a.parameters_snapshot(), b.parameters_snapshot());
}

// The same samples padded further: equal loss up to float summation order (dropout off, since
// masks are drawn per padded shape).
TEST_F(TrainerTest, ExtraPaddingGivesTheSameLoss) {
  const HostBatch tight = make_batch(3, 8, 20, kMels, kVocab, 4);
  HostBatch loose;
  loose.batch_size = tight.batch_size;
  loose.max_tokens = tight.max_tokens + 5;
  loose.max_frames = tight.max_frames + 13;
  loose.n_mels = kMels;
  loose.tokens.assign(static_cast<size_t>(loose.batch_size) * loose.max_tokens, 3);
  loose.mels.assign(static_cast<size_t>(loose.batch_size) * loose.max_frames * kMels, 7.0f);
  loose.token_lens = tight.token_lens;
  loose.mel_lens = tight.mel_lens;
  HostBatch source = tight;
  for (int b = 0; b < tight.batch_size; ++b) {
    for (int t = 0; t < tight.max_tokens; ++t) loose.token(b, t) = source.token(b, t);
    for (int f = 0; f < tight.max_frames; ++f) {
      for (int m = 0; m < kMels; ++m) loose.mel(b, f, m) = source.mel(b, f, m);
    }
  }
  ModelConfig config = tiny_model(kMels, kVocab);
  config.dropout = 0.0;
  config.prenet_dropout = 0.0;
  Trainer trainer(config, constant_lr(), 2);
  const double tight_loss = trainer.validation_loss(tight.view());
  const double loose_loss = trainer.validation_loss(loose.view());
  EXPECT_NEAR(tight_loss, loose_loss, 1e-5 * tight_loss);
}

TEST_F(TrainerTest, LossFallsWhenOverfittingOneBatch) {
  const HostBatch batch = make_batch(4, 10, 40, kMels, kVocab, 6);
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(1e-3), 11);  // default dropout 0.1 / prenet 0.5
  const double initial_validation = trainer.validation_loss(batch.view());
  StepResult first, last;
  for (int step = 0; step < 30; ++step) {
    const StepResult r = trainer.train_step(batch.view());
    if (step == 0) first = r;
    last = r;
  }
  const double final_validation = trainer.validation_loss(batch.view());
  std::printf("[ overfit ] train loss %.4f -> %.4f (mel %.4f -> %.4f, postnet %.4f -> %.4f, stop %.4f -> %.4f); "
              "validation %.4f -> %.4f\n",
              first.loss, last.loss, first.mel_loss, last.mel_loss, first.postnet_loss, last.postnet_loss,
              first.stop_loss, last.stop_loss, initial_validation, final_validation);
  EXPECT_LT(last.loss, 0.5 * first.loss);
  EXPECT_LT(final_validation, 0.5 * initial_validation);
  EXPECT_LT(last.mel_loss, first.mel_loss);
  EXPECT_LT(last.postnet_loss, first.postnet_loss);
  EXPECT_LT(last.stop_loss, first.stop_loss);
}

// Two half-batches with accumulation_steps 2 update the weights like one full batch. Lengths
// are equal so that the per-micro-batch means weigh frames the same as the full-batch mean.
// Adam's eps is large here so that its update follows the gradient rather than its sign: with a
// tiny eps, float noise in near-zero gradients flips whole-lr updates and hides the comparison.
TEST_F(TrainerTest, GradientAccumulationMatchesOneFullBatch) {
  const HostBatch full = make_batch(4, 10, 32, kMels, kVocab, 8, /*equal_lengths=*/true);
  const HostBatch first_half = testing::slice_batch(full, 0, 2);
  const HostBatch second_half = testing::slice_batch(full, 2, 2);
  ModelConfig config = tiny_model(kMels, kVocab);
  config.dropout = 0.0;
  config.prenet_dropout = 0.0;
  OptimizerConfig single = constant_lr(0.1);
  single.eps = 1.0;
  OptimizerConfig accumulate = single;
  accumulate.accumulation_steps = 2;

  Trainer whole(config, single, 21);
  Trainer halves(config, accumulate, 21);
  const std::vector<float> initial = whole.parameters_snapshot();
  for (int step = 0; step < 2; ++step) {
    const StepResult w = whole.train_step(full.view());
    const StepResult h1 = halves.train_step(first_half.view());
    const StepResult h2 = halves.train_step(second_half.view());
    EXPECT_TRUE(w.optimizer_stepped);
    EXPECT_FALSE(h1.optimizer_stepped);
    EXPECT_EQ(h1.grad_norm, 0.0);
    EXPECT_TRUE(h2.optimizer_stepped);
    EXPECT_NEAR(0.5 * (h1.loss + h2.loss), w.loss, 1e-5);
    EXPECT_NEAR(h2.grad_norm, w.grad_norm, 1e-4 * w.grad_norm);
  }
  EXPECT_EQ(halves.optimizer_steps(), 2);
  EXPECT_EQ(halves.micro_steps(), 4);
  const std::vector<float> after = whole.parameters_snapshot();
  const float update = max_abs_difference(initial, after);
  const float difference = max_abs_difference(after, halves.parameters_snapshot());
  std::printf("[ accumulation ] max |param difference| %g vs max |update| %g after 2 steps\n", difference, update);
  EXPECT_GT(update, 1e-3f);
  EXPECT_LT(difference, 1e-4f * update);
}

// With every simulated rank holding the same gradient, the bucketed, overlapped reduction must
// give exactly the local update; buckets start in id order and cover every gradient once.
TEST_F(TrainerTest, BucketedReductionMatchesLocalTraining) {
  const HostBatch batch = make_batch(3, 9, 24, kMels, kVocab, 9);
  OptimizerConfig optimizer = constant_lr();
  optimizer.accumulation_steps = 2;
  LoopbackReducer reducer(2, 64 * 1024);
  Trainer local(tiny_model(kMels, kVocab), optimizer, 4);
  Trainer reduced(tiny_model(kMels, kVocab), optimizer, 4, &reducer);
  for (int micro = 0; micro < 6; ++micro) {
    const StepResult a = local.train_step(batch.view());
    const StepResult b = reduced.train_step(batch.view());
    EXPECT_EQ(a.loss, b.loss) << "micro-step " << micro;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "micro-step " << micro;
  }
  EXPECT_EQ(local.parameters_snapshot(), reduced.parameters_snapshot());

  const auto calls = reducer.started();
  EXPECT_EQ(reducer.wait_all_calls(), 3);  // once per optimiser step, not per micro-step
  ASSERT_EQ(calls.size() % 3, 0u);
  const size_t buckets = calls.size() / 3;
  EXPECT_GT(buckets, 3u) << "64 KiB buckets should split the tiny model";
  for (size_t step = 0; step < 3; ++step) {
    size_t covered = 0;
    for (size_t i = 0; i < buckets; ++i) {
      const auto& call = calls[step * buckets + i];
      EXPECT_EQ(call.bucket_id, static_cast<int>(i));
      covered += call.count;
    }
    EXPECT_EQ(covered, static_cast<size_t>(reduced.parameter_count()));
  }
  EXPECT_NE(reduced.describe().find("over 2 ranks"), std::string::npos);
}

// Train N steps, save, train M more; a fresh trainer (other seed) that loads the checkpoint and
// trains the same M steps sees identical losses and ends with identical weights. Dropout is on,
// so the dropout masks must repeat too.
void check_exact_resume(const fs::path& dir, int accumulation, int steps_before, int steps_after) {
  ModelConfig config = tiny_model(kMels, kVocab);
  config.dropout = 0.1;
  config.prenet_dropout = 0.5;
  OptimizerConfig optimizer;
  optimizer.lr = 2e-3;
  optimizer.warmup_steps = 3;
  optimizer.accumulation_steps = accumulation;
  std::vector<HostBatch> batches;
  for (int i = 0; i < steps_before + steps_after; ++i) batches.push_back(make_batch(3, 9, 24, kMels, kVocab, 20 + i));

  Trainer original(config, optimizer, 1234);
  for (int i = 0; i < steps_before; ++i) original.train_step(batches[i].view());
  const fs::path path = dir / "resume.ckpt";
  const nlohmann::json position = {{"epoch", 2}, {"cursor", steps_before}};
  original.save_checkpoint(path, position);
  std::vector<StepResult> expected;
  for (int i = steps_before; i < steps_before + steps_after; ++i) expected.push_back(original.train_step(batches[i].view()));

  Trainer resumed(config, optimizer, 999);
  EXPECT_EQ(resumed.load_checkpoint(path), position);
  EXPECT_EQ(resumed.micro_steps(), steps_before);
  for (int i = 0; i < steps_after; ++i) {
    const StepResult r = resumed.train_step(batches[steps_before + i].view());
    EXPECT_EQ(r.loss, expected[i].loss) << "step " << i << " after resume";
    EXPECT_EQ(r.stop_loss, expected[i].stop_loss) << "step " << i << " after resume";
    EXPECT_EQ(r.grad_norm, expected[i].grad_norm) << "step " << i << " after resume";
    EXPECT_EQ(r.lr, expected[i].lr) << "step " << i << " after resume";
    EXPECT_EQ(r.optimizer_stepped, expected[i].optimizer_stepped);
  }
  EXPECT_EQ(resumed.optimizer_steps(), original.optimizer_steps());
  EXPECT_EQ(resumed.parameters_snapshot(), original.parameters_snapshot());
}

TEST_F(TrainerTest, CheckpointResumesExactly) { check_exact_resume(dir_, 1, 3, 3); }

TEST_F(TrainerTest, CheckpointResumesExactlyInsideAnAccumulationWindow) { check_exact_resume(dir_, 2, 3, 3); }

TEST_F(TrainerTest, CheckpointIsReplacedAtomically) {
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(), 1);
  const fs::path path = dir_ / "model.ckpt";
  trainer.save_checkpoint(path, {{"step", 0}});
  Trainer fresh(tiny_model(kMels, kVocab), constant_lr(), 2);
  EXPECT_EQ(fresh.load_checkpoint(path)["step"], 0);  // no optimiser state yet
  EXPECT_EQ(fresh.parameters_snapshot(), trainer.parameters_snapshot());
  trainer.train_step(make_batch(2, 6, 12, kMels, kVocab, 1).view());
  trainer.save_checkpoint(path, {{"step", 1}});
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "model.ckpt");
  }
  EXPECT_EQ(files, 1u);
  Trainer other(tiny_model(kMels, kVocab), constant_lr(), 2);
  EXPECT_EQ(other.load_checkpoint(path)["step"], 1);
  EXPECT_EQ(other.parameters_snapshot(), trainer.parameters_snapshot());
}

TEST_F(TrainerTest, CheckpointOfAnotherModelIsRejected) {
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(), 1);
  const fs::path path = dir_ / "model.ckpt";
  trainer.save_checkpoint(path, nlohmann::json::object());
  Trainer other(tiny_model(kMels + 1, kVocab), constant_lr(), 1);
  EXPECT_THROW(other.load_checkpoint(path), ConfigError);
  EXPECT_THROW(other.load_checkpoint(dir_ / "missing.ckpt"), Error);
}

TEST_F(TrainerTest, ValidationIsDeterministicAndLeavesTrainingUntouched) {
  const HostBatch batch = make_batch(3, 9, 24, kMels, kVocab, 30);
  Trainer plain(tiny_model(kMels, kVocab), constant_lr(), 3);
  Trainer validated(tiny_model(kMels, kVocab), constant_lr(), 3);
  for (int step = 0; step < 3; ++step) {
    const double v1 = validated.validation_loss(batch.view());
    EXPECT_EQ(v1, validated.validation_loss(batch.view()));
    EXPECT_EQ(plain.train_step(batch.view()).loss, validated.train_step(batch.view()).loss);
  }
  EXPECT_EQ(plain.parameters_snapshot(), validated.parameters_snapshot());
}

TEST_F(TrainerTest, MalformedBatchesAreRejected) {
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(), 1);
  HostBatch batch = make_batch(2, 6, 12, kMels, kVocab, 1);
  HostBatch bad = batch;
  bad.token_lens[1] = 0;
  EXPECT_THROW(trainer.train_step(bad.view()), DataError);
  bad = batch;
  bad.mel_lens[0] = bad.max_frames + 1;
  EXPECT_THROW(trainer.train_step(bad.view()), DataError);
  bad = batch;
  bad.token(1, 0) = kVocab;
  try {
    trainer.train_step(bad.view());
    ADD_FAILURE() << "out-of-vocabulary token accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1"), std::string::npos) << e.what();
  }
  BatchView view = batch.view();
  view.n_mels = kMels + 1;
  EXPECT_THROW(trainer.train_step(view), ConfigError);
  view = batch.view();
  view.on_device = true;
  EXPECT_THROW(trainer.train_step(view), ConfigError);
  EXPECT_EQ(trainer.micro_steps(), 0);
  EXPECT_TRUE(trainer.train_step(batch.view()).optimizer_stepped);
}

// A non-finite gradient (here from NaN inside the valid frames) skips the update and drops the
// gradient; the next step trains normally.
TEST_F(TrainerTest, NonFiniteGradientSkipsTheUpdate) {
  Trainer trainer(tiny_model(kMels, kVocab), constant_lr(), 1);
  const HostBatch batch = make_batch(2, 6, 12, kMels, kVocab, 1);
  HostBatch poisoned = batch;
  poisoned.mel(0, 1, 3) = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = trainer.parameters_snapshot();
  const StepResult bad = trainer.train_step(poisoned.view());
  EXPECT_TRUE(bad.nonfinite_gradient);
  EXPECT_FALSE(bad.optimizer_stepped);
  EXPECT_EQ(bad.optimizer_steps, 0);
  EXPECT_TRUE(std::isnan(bad.loss));
  EXPECT_EQ(trainer.parameters_snapshot(), before);
  const StepResult good = trainer.train_step(batch.view());
  EXPECT_TRUE(good.optimizer_stepped);
  EXPECT_TRUE(std::isfinite(good.grad_norm));
  EXPECT_EQ(good.optimizer_steps, 1);
}

TEST_F(TrainerTest, UnavailableDeviceIsAConfigError) {
  ModelConfig config = tiny_model(kMels, kVocab);
  config.device = "cuda:99";
  EXPECT_THROW(Trainer(config, constant_lr(), 1), ConfigError);
}

}  // namespace
}  // namespace sluice::model
