#include "model/device_feature_transform.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "common/error.h"

namespace sluice::model {
namespace {

class TorchMelArithmetic final : public DeviceMelArithmetic {
 public:
  TorchMelArithmetic(at::Device device, std::vector<float> mean, std::vector<float> inverse_stddev)
      : device_(device) {
    if (mean.empty()) return;
    const auto n = static_cast<int64_t>(mean.size());
    // clone(): from_blob aliases the vectors, which do not outlive this.
    mean_ = at::from_blob(mean.data(), {n}, at::kFloat).clone().to(device_);
    inverse_stddev_ = at::from_blob(inverse_stddev.data(), {n}, at::kFloat).clone().to(device_);
  }

  void apply(const MelBatchRef& batch, bool normalize, const std::vector<float>& time_keep,
             const std::vector<float>& freq_keep) const override {
    const int64_t b = batch.batch_size, f = batch.max_frames, m = batch.n_mels;
    try {
      at::Tensor mels = at::from_blob(batch.mels, {b, f, m}, at::TensorOptions().dtype(at::kFloat).device(device_));
      if (normalize) mels.sub_(mean_).mul_(inverse_stddev_);
      mels.mul_(on_device(time_keep, {b, f}).unsqueeze(2));
      if (!freq_keep.empty()) mels.mul_(on_device(freq_keep, {b, m}).unsqueeze(1));
      if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
    } catch (const c10::Error& error) {
      throw Error(ErrorKind::internal, "feature transform on " + device_.str() + ": " + error.what_without_backtrace());
    }
  }

 private:
  // A copy on the device of a host array that outlives the call (from pageable memory the copy is
  // done when this returns).
  at::Tensor on_device(const std::vector<float>& host, at::IntArrayRef shape) const {
    return at::from_blob(const_cast<float*>(host.data()), shape, at::kFloat).to(device_);
  }

  at::Device device_;
  at::Tensor mean_, inverse_stddev_;  // [n_mels] on the device; undefined without normalisation
};

}  // namespace

std::unique_ptr<FeatureTransform> make_feature_transform(FeatureTransformSettings settings, const std::string& device) {
  at::Device where{at::kCPU};
  try {
    where = at::Device(device);
  } catch (const std::exception&) {
    throw ConfigError("feature transform: '" + device + "' is not a device; use cpu or cuda:N");
  }
  if (where.is_cpu()) return std::make_unique<FeatureTransform>(std::move(settings), "cpu");
  if (where.is_cuda() && !torch::cuda::is_available()) {
    throw ConfigError("feature transform on " + device + " but torch sees no CUDA device (CPU-only libtorch or no GPU)");
  }
  auto arithmetic = std::make_unique<TorchMelArithmetic>(where, settings.mean, inverse_stddevs(settings.stddev));
  return std::make_unique<FeatureTransform>(std::move(settings), where.str(), std::move(arithmetic));
}

}  // namespace sluice::model
