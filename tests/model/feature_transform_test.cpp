// The per-batch feature transform on the CPU: normalisation values, masks as a pure function of
// (seed, step, sample), padding left at zero, validation unmasked, and the same bits as libtorch's
// CPU kernels, which did this work before the host path became plain loops (sluice_model_core).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "model/feature_transform.h"

namespace sluice::model {
namespace {

constexpr int kBatch = 3, kFrames = 40, kMels = 6;

struct Batch {
  std::vector<float> mels = std::vector<float>(kBatch * kFrames * kMels, 0.0f);
  std::vector<int32_t> lens{40, 25, 7};
  std::vector<int64_t> indices{11, 4, 97};
  Batch() {
    for (int b = 0; b < kBatch; ++b) {
      for (int t = 0; t < lens[b]; ++t) {
        for (int m = 0; m < kMels; ++m) at(b, t, m) = -4.0f + 0.5f * m + 0.01f * t + b;
      }
    }
  }
  float& at(int b, int t, int m) { return mels[(b * kFrames + t) * kMels + m]; }
  MelBatchRef ref() {
    return {mels.data(), lens.data(), indices.data(), kBatch, kFrames, kMels};
  }
};

FeatureTransformSettings normalising() {
  FeatureTransformSettings settings;
  for (int m = 0; m < kMels; ++m) {
    settings.mean.push_back(-3.0f + 0.5f * m);
    settings.stddev.push_back(2.0f);
  }
  return settings;
}

TEST(FeatureTransform, NormalisesValidFramesPerBinAndKeepsPaddingZero) {
  Batch batch;
  const Batch original;
  FeatureTransform transform(normalising(), "cpu");
  ASSERT_TRUE(transform.active());
  transform.apply(batch.ref(), 5, true);
  Batch copy = original;
  for (int b = 0; b < kBatch; ++b) {
    for (int t = 0; t < kFrames; ++t) {
      for (int m = 0; m < kMels; ++m) {
        const float expected = t < batch.lens[b] ? (copy.at(b, t, m) - (-3.0f + 0.5f * m)) / 2.0f : 0.0f;
        ASSERT_FLOAT_EQ(batch.at(b, t, m), expected) << "sample " << b << " frame " << t << " bin " << m;
      }
    }
  }
  // Sample 0, frame 0, bin 0: (-4 - -3) / 2.
  EXPECT_FLOAT_EQ(batch.at(0, 0, 0), -0.5f);
}

TEST(FeatureTransform, ZeroDeviationIsFlooredNotDividedBy) {
  FeatureTransformSettings settings = normalising();
  settings.stddev[2] = 0.0f;
  Batch batch;
  FeatureTransform(settings, "cpu").apply(batch.ref(), 0, false);
  for (float value : batch.mels) ASSERT_TRUE(std::isfinite(value));
}

TEST(FeatureTransform, MasksArePureFunctionsOfSeedStepAndSample) {
  MelMasking masking{2, 10, 1, 3};
  const MaskSpans a = mask_spans(masking, 7, 100, 42, 300, 80);
  const MaskSpans b = mask_spans(masking, 7, 100, 42, 300, 80);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.freq, b.freq);
  // Another step or sample draws other masks (over many draws, not all equal).
  int differing = 0;
  for (int64_t step = 0; step < 20; ++step) {
    differing += mask_spans(masking, 7, step, 42, 300, 80).time != a.time ? 1 : 0;
  }
  EXPECT_GE(differing, 18);
  // Bounds over many samples: widths <= max, inside the valid frames and the mel bins.
  for (int64_t sample = 0; sample < 500; ++sample) {
    const int32_t frames = static_cast<int32_t>(1 + sample % 60);
    const MaskSpans spans = mask_spans(masking, 3, 9, sample, frames, 80);
    EXPECT_LE(spans.time.size(), 2u);
    EXPECT_LE(spans.freq.size(), 1u);
    for (const auto& [start, end] : spans.time) {
      ASSERT_LT(start, end);
      ASSERT_LE(end - start, 10);
      ASSERT_GE(start, 0);
      ASSERT_LE(end, frames);
    }
    for (const auto& [start, end] : spans.freq) {
      ASSERT_LE(end - start, 3);
      ASSERT_LE(end, 80);
    }
  }
}

TEST(FeatureTransform, MasksZeroExactlyTheirSpansAndOnlyWhenAugmenting) {
  FeatureTransformSettings settings;
  settings.masking = {2, 8, 2, 2};
  settings.seed = 99;
  FeatureTransform transform(settings, "cpu");
  Batch masked;
  transform.apply(masked.ref(), 12, true);
  Batch expected;
  int zeroed = 0;
  for (int b = 0; b < kBatch; ++b) {
    const MaskSpans spans = mask_spans(settings.masking, 99, 12, expected.indices[b], expected.lens[b], kMels);
    for (int t = 0; t < kFrames; ++t) {
      for (int m = 0; m < kMels; ++m) {
        bool hidden = t >= expected.lens[b];
        for (const auto& [start, end] : spans.time) hidden |= t >= start && t < end;
        for (const auto& [start, end] : spans.freq) hidden |= m >= start && m < end;
        const float want = hidden ? 0.0f : expected.at(b, t, m);
        ASSERT_FLOAT_EQ(masked.at(b, t, m), want) << "sample " << b << " frame " << t << " bin " << m;
        zeroed += hidden && t < expected.lens[b] ? 1 : 0;
      }
    }
  }
  EXPECT_GT(zeroed, 0);  // the seed above does mask something
  // Validation: no masks, and no normalisation configured: the batch is untouched.
  Batch untouched;
  transform.apply(untouched.ref(), 12, false);
  EXPECT_EQ(untouched.mels, Batch().mels);
}

TEST(FeatureTransform, StatisticsOfAnotherWidthAreRefused) {
  Batch batch;
  FeatureTransformSettings settings = normalising();
  settings.mean.pop_back();
  EXPECT_THROW(FeatureTransform(settings, "cpu"), ConfigError);
  settings.stddev.pop_back();
  FeatureTransform five_bins(settings, "cpu");
  try {
    five_bins.apply(batch.ref(), 0, true);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("5 mel bins but the batch has 6"), std::string::npos) << error.what();
  }
}

TEST(FeatureTransform, DescribesWhatItDoes) {
  FeatureTransformSettings settings = normalising();
  settings.masking = {2, 20, 1, 8};
  EXPECT_EQ(FeatureTransform(settings, "cpu").describe(),
            "normalise 6 mel bins with the cache's statistics; mask 2 x <= 20 frames and 1 x <= 8 mel bins per "
            "sample on cpu");
  EXPECT_FALSE(FeatureTransform(FeatureTransformSettings{}, "cpu").active());
}

// The host loops give libtorch's CPU bits (what FeatureTransform computed with libtorch before,
// and what the CUDA path still does): x.sub_(mean).mul_(1 / stddev), then times the keep factors,
// on a full-size batch of random values of both signs, with every mask kind. The keep factors are
// the transform's own (its result on a batch of ones without statistics); the reference then
// multiplies by them as the torch version did.
TEST(FeatureTransform, HostLoopsGiveLibtorchsCpuBits) {
  constexpr int64_t batch = 8, frames = 300, mels = 80;
  std::mt19937 random(7);
  std::normal_distribution<float> value(-5.0f, 4.0f);
  std::vector<float> input(batch * frames * mels);
  for (float& x : input) x = value(random);
  std::vector<int32_t> lens(batch);
  std::vector<int64_t> indices(batch);
  for (int64_t b = 0; b < batch; ++b) {
    lens[b] = static_cast<int32_t>(frames - 30 * b);
    indices[b] = 1000 + 13 * b;
  }
  FeatureTransformSettings settings;
  for (int m = 0; m < mels; ++m) {
    settings.mean.push_back(value(random));
    settings.stddev.push_back(m == 3 ? 0.0f : std::fabs(value(random)) / 3.0f);  // bin 3: floored deviation
  }
  settings.masking = {2, 40, 2, 12};
  settings.seed = 99;

  std::vector<float> mine = input;
  FeatureTransform(settings, "cpu").apply({mine.data(), lens.data(), indices.data(), batch, frames, mels}, 12, true);

  FeatureTransformSettings masks_only = settings;
  masks_only.mean.clear();
  masks_only.stddev.clear();
  std::vector<float> keep(input.size(), 1.0f);
  FeatureTransform(masks_only, "cpu").apply({keep.data(), lens.data(), indices.data(), batch, frames, mels}, 12, true);
  const std::vector<float> inverse = inverse_stddevs(settings.stddev);
  std::vector<float> reference = input;
  at::Tensor x = at::from_blob(reference.data(), {batch, frames, mels}, at::kFloat);
  x.sub_(at::from_blob(settings.mean.data(), {mels}, at::kFloat))
      .mul_(at::from_blob(const_cast<float*>(inverse.data()), {mels}, at::kFloat));
  x.mul_(at::from_blob(keep.data(), {batch, frames, mels}, at::kFloat));

  ASSERT_EQ(std::memcmp(mine.data(), reference.data(), mine.size() * sizeof(float)), 0);
  size_t masked = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < lens[b]; ++t) masked += keep[(b * frames + t) * mels + 5] == 0.0f ? 1 : 0;
  }
  EXPECT_GT(masked, 0u);  // the masks were in the comparison
}

}  // namespace
}  // namespace sluice::model
