#include "model/feature_transform.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "common/splitmix64.h"

namespace sluice::model {
namespace {

class SampleDraws {
 public:
  SampleDraws(uint64_t seed, int64_t step, int64_t sample)
      : state_(splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(sample))) {}
  // Uniform in [0, n]; n >= 0.
  int32_t up_to(int32_t n) {
    state_ = splitmix64(state_);
    return static_cast<int32_t>(state_ % (static_cast<uint64_t>(n) + 1));
  }

 private:
  uint64_t state_;
};

void add_spans(SampleDraws& draws, int count, int max_width, int32_t length,
               std::vector<std::pair<int32_t, int32_t>>& spans) {
  for (int i = 0; i < count; ++i) {
    const int32_t width = draws.up_to(std::min<int32_t>(max_width, length));
    const int32_t start = draws.up_to(length - width);
    if (width > 0) spans.emplace_back(start, start + width);
  }
}

constexpr float min_stddev = 1e-4f;

// One frame of n mel bins: ((x - mean) * inverse) * keep * freq, left to right, each step rounded
// once: the steps of libtorch's CPU kernels that did this before (sub_, mul_, mul_ by the time
// keep factor, mul_ by the frequency keep factor), so the same bits, signed zeros included (no
// step can become a fused multiply-add: none adds a product). Compiled for AVX2 as well, which
// the loader picks where the CPU has it, and vectorised (CMakeLists.txt) as libtorch's were.
__attribute__((target_clones("avx2", "default"))) void transform_frame(
    float* __restrict row, const float* __restrict mean, const float* __restrict inverse, float keep,
    const float* __restrict freq, int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] = (row[j] - mean[j]) * inverse[j] * keep * freq[j];
}

}  // namespace

MaskSpans mask_spans(const MelMasking& masking, uint64_t seed, int64_t global_step, int64_t sample_index,
                     int32_t frames, int32_t n_mels) {
  MaskSpans spans;
  SampleDraws draws(seed, global_step, sample_index);
  add_spans(draws, masking.time_masks, masking.max_time_frames, std::max(0, frames), spans.time);
  add_spans(draws, masking.freq_masks, masking.max_freq_bins, std::max(0, n_mels), spans.freq);
  return spans;
}

std::vector<float> inverse_stddevs(const std::vector<float>& stddev) {
  std::vector<float> inverse(stddev.size());
  for (size_t i = 0; i < inverse.size(); ++i) inverse[i] = 1.0f / std::max(stddev[i], min_stddev);
  return inverse;
}

FeatureTransform::FeatureTransform(FeatureTransformSettings settings, const std::string& device)
    : FeatureTransform(std::move(settings), device, nullptr) {}

FeatureTransform::FeatureTransform(FeatureTransformSettings settings, std::string device,
                                   std::unique_ptr<DeviceMelArithmetic> arithmetic)
    : device_(std::move(device)), arithmetic_(std::move(arithmetic)) {
  if (settings.mean.size() != settings.stddev.size()) {
    throw ConfigError("feature normalisation: " + std::to_string(settings.mean.size()) + " means but " +
                      std::to_string(settings.stddev.size()) + " standard deviations");
  }
  if (!arithmetic_ && device_ != "cpu") {
    if (device_.rfind("cuda", 0) != 0) {
      throw ConfigError("feature transform: '" + device_ + "' is not a device; use cpu or cuda:N");
    }
    throw ConfigError("feature transform on " + device_ + " needs libtorch's GPU arithmetic, which this process does "
                      "not link (only sluice-train's data ranks run feature work on a GPU)");
  }
  inverse_stddev_ = inverse_stddevs(settings.stddev);
  settings_ = std::move(settings);
}

FeatureTransform::~FeatureTransform() = default;

bool FeatureTransform::normalizes() const { return !settings_.mean.empty(); }

bool FeatureTransform::active() const { return normalizes() || settings_.masking.active(); }

void FeatureTransform::apply(const MelBatchRef& batch, int64_t global_step, bool augment) const {
  const bool mask = augment && settings_.masking.active();
  if (!normalizes() && !mask) return;
  if (normalizes() && static_cast<size_t>(batch.n_mels) != settings_.mean.size()) {
    throw ConfigError("feature normalisation: the statistics have " + std::to_string(settings_.mean.size()) +
                      " mel bins but the batch has " + std::to_string(batch.n_mels) +
                      " (statistics from another cache?)");
  }
  const int64_t b = batch.batch_size, f = batch.max_frames, m = batch.n_mels;
  // Keep factors built on the host: 1 on valid frames outside a mask, 0 on padding and masks.
  std::vector<float> time_keep(static_cast<size_t>(b * f), 0.0f);
  std::vector<float> freq_keep;
  if (mask && settings_.masking.freq_masks > 0) freq_keep.assign(static_cast<size_t>(b * m), 1.0f);
  float* time = time_keep.data();
  float* freq = freq_keep.empty() ? nullptr : freq_keep.data();
  for (int64_t i = 0; i < b; ++i) {
    const int32_t frames = std::clamp<int32_t>(batch.mel_lens[i], 0, batch.max_frames);
    std::fill(time + i * f, time + i * f + frames, 1.0f);
    if (!mask) continue;
    const MaskSpans spans = mask_spans(settings_.masking, settings_.seed, global_step, batch.sample_indices[i],
                                       frames, batch.n_mels);
    for (const auto& [start, end] : spans.time) std::fill(time + i * f + start, time + i * f + end, 0.0f);
    if (freq != nullptr) {
      for (const auto& [start, end] : spans.freq) std::fill(freq + i * m + start, freq + i * m + end, 0.0f);
    }
  }
  if (arithmetic_) {
    arithmetic_->apply(batch, normalizes(), time_keep, freq_keep);
  } else {
    apply_on_host(batch, time_keep, freq_keep);
  }
}

void FeatureTransform::apply_on_host(const MelBatchRef& batch, const std::vector<float>& time_keep,
                                     const std::vector<float>& freq_keep) const {
  const int64_t f = batch.max_frames, m = batch.n_mels;
  // Without statistics or frequency masks the factors that leave x as it is: x - 0 and x * 1 are x,
  // bit for bit (signed zeros and NaNs included), so one loop serves every case.
  const std::vector<float> zeros(normalizes() ? 0 : m, 0.0f), ones(m, 1.0f);
  const float* mean = normalizes() ? settings_.mean.data() : zeros.data();
  const float* inverse = normalizes() ? inverse_stddev_.data() : ones.data();
  for (int64_t i = 0; i < batch.batch_size; ++i) {
    const float* freq = freq_keep.empty() ? ones.data() : freq_keep.data() + i * m;
    for (int64_t t = 0; t < f; ++t) {
      transform_frame(batch.mels + (i * f + t) * m, mean, inverse, time_keep[static_cast<size_t>(i * f + t)], freq, m);
    }
  }
}

std::string FeatureTransform::describe() const {
  std::ostringstream out;
  const MelMasking& masking = settings_.masking;
  if (normalizes()) out << "normalise " << settings_.mean.size() << " mel bins with the cache's statistics";
  if (masking.active()) {
    if (normalizes()) out << "; ";
    out << "mask " << masking.time_masks << " x <= " << masking.max_time_frames << " frames and "
        << masking.freq_masks << " x <= " << masking.max_freq_bins << " mel bins per sample";
  }
  if (!active()) out << "no feature transform";
  out << " on " << device_;
  return out.str();
}

}  // namespace sluice::model
