#include "model/feature_transform.h"

#include <algorithm>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/cuda.h>

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

}  // namespace

MaskSpans mask_spans(const MelMasking& masking, uint64_t seed, int64_t global_step, int64_t sample_index,
                     int32_t frames, int32_t n_mels) {
  MaskSpans spans;
  SampleDraws draws(seed, global_step, sample_index);
  add_spans(draws, masking.time_masks, masking.max_time_frames, std::max(0, frames), spans.time);
  add_spans(draws, masking.freq_masks, masking.max_freq_bins, std::max(0, n_mels), spans.freq);
  return spans;
}

struct FeatureTransform::Impl {
  FeatureTransformSettings settings;
  at::Device device{at::kCPU};
  at::Tensor mean, inverse_stddev;  // [n_mels] on the device
};

FeatureTransform::FeatureTransform(FeatureTransformSettings settings, const std::string& device)
    : impl_(std::make_unique<Impl>()) {
  if (settings.mean.size() != settings.stddev.size()) {
    throw ConfigError("feature normalisation: " + std::to_string(settings.mean.size()) + " means but " +
                      std::to_string(settings.stddev.size()) + " standard deviations");
  }
  try {
    impl_->device = at::Device(device);
  } catch (const std::exception&) {
    throw ConfigError("feature transform: '" + device + "' is not a device; use cpu or cuda:N");
  }
  if (impl_->device.is_cuda() && !torch::cuda::is_available()) {
    throw ConfigError("feature transform on " + device + " but torch sees no CUDA device (CPU-only libtorch or no GPU)");
  }
  if (!settings.mean.empty()) {
    const auto n = static_cast<int64_t>(settings.mean.size());
    std::vector<float> inverse(settings.stddev.size());
    for (size_t i = 0; i < inverse.size(); ++i) inverse[i] = 1.0f / std::max(settings.stddev[i], min_stddev);
    // clone(): from_blob aliases, and on the CPU .to() does not copy; the vectors do not outlive this.
    impl_->mean = at::from_blob(settings.mean.data(), {n}, at::kFloat).clone().to(impl_->device);
    impl_->inverse_stddev = at::from_blob(inverse.data(), {n}, at::kFloat).clone().to(impl_->device);
  }
  impl_->settings = std::move(settings);
}

FeatureTransform::~FeatureTransform() = default;

bool FeatureTransform::normalizes() const { return impl_->mean.defined(); }

bool FeatureTransform::active() const { return normalizes() || impl_->settings.masking.active(); }

void FeatureTransform::apply(const MelBatchRef& batch, int64_t global_step, bool augment) const {
  const Impl& s = *impl_;
  const bool mask = augment && s.settings.masking.active();
  if (!normalizes() && !mask) return;
  if (normalizes() && batch.n_mels != s.mean.size(0)) {
    throw ConfigError("feature normalisation: the statistics have " + std::to_string(s.mean.size(0)) +
                      " mel bins but the batch has " + std::to_string(batch.n_mels) +
                      " (statistics from another cache?)");
  }
  const int64_t b = batch.batch_size, f = batch.max_frames, m = batch.n_mels;
  try {
    at::Tensor mels = at::from_blob(batch.mels, {b, f, m}, at::TensorOptions().dtype(at::kFloat).device(s.device));
    // Keep factors built on the host: 1 on valid frames outside a mask, 0 on padding and masks.
    at::Tensor time_keep = at::zeros({b, f}, at::kFloat);
    at::Tensor freq_keep;
    float* time = time_keep.data_ptr<float>();
    float* freq = nullptr;
    if (mask && s.settings.masking.freq_masks > 0) {
      freq_keep = at::ones({b, m}, at::kFloat);
      freq = freq_keep.data_ptr<float>();
    }
    for (int64_t i = 0; i < b; ++i) {
      const int32_t frames = std::clamp<int32_t>(batch.mel_lens[i], 0, batch.max_frames);
      std::fill(time + i * f, time + i * f + frames, 1.0f);
      if (!mask) continue;
      const MaskSpans spans = mask_spans(s.settings.masking, s.settings.seed, global_step, batch.sample_indices[i],
                                         frames, batch.n_mels);
      for (const auto& [start, end] : spans.time) std::fill(time + i * f + start, time + i * f + end, 0.0f);
      if (freq != nullptr) {
        for (const auto& [start, end] : spans.freq) std::fill(freq + i * m + start, freq + i * m + end, 0.0f);
      }
    }
    if (normalizes()) mels.sub_(s.mean).mul_(s.inverse_stddev);
    mels.mul_(time_keep.to(s.device).unsqueeze(2));
    if (freq_keep.defined()) mels.mul_(freq_keep.to(s.device).unsqueeze(1));
    if (s.device.is_cuda()) torch::cuda::synchronize(s.device.index());
  } catch (const c10::Error& error) {
    throw Error(ErrorKind::internal, std::string("feature transform on ") + s.device.str() + ": " + error.what_without_backtrace());
  }
}

std::string FeatureTransform::describe() const {
  std::ostringstream out;
  const MelMasking& masking = impl_->settings.masking;
  if (normalizes()) out << "normalise " << impl_->mean.size(0) << " mel bins with the cache's statistics";
  if (masking.active()) {
    if (normalizes()) out << "; ";
    out << "mask " << masking.time_masks << " x <= " << masking.max_time_frames << " frames and "
        << masking.freq_masks << " x <= " << masking.max_freq_bins << " mel bins per sample";
  }
  if (!active()) out << "no feature transform";
  out << " on " << impl_->device.str();
  return out.str();
}

}  // namespace sluice::model
