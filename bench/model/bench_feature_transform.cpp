// bench_feature_transform [device] [batch] [frames] [n_mels] [rounds]
// Defaults: cpu 32 800 80 50. What a data rank's feature work costs per batch: normalisation with
// per-bin statistics, then normalisation plus SpecAugment-style masks, against copying the same
// mel bytes once (memcpy on the CPU, a device-to-device tensor copy on CUDA) measured in the same
// run. Median microseconds per batch over `rounds`; ratio = transform time / copy time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/device_facts.h"
#include "model/device_feature_transform.h"
#include "model/trainer.h"

#if SLUICE_BENCH_CUDART
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

// The batch's mels where the transform runs: host memory, or device memory on "cuda:N".
class DeviceBuffer {
 public:
  DeviceBuffer(const std::string& device, const std::vector<float>& values)
      : on_host_(device == "cpu"), bytes_(values.size() * sizeof(float)) {
    if (on_host_) {
      data_ = values;
      copy_.resize(values.size());
      return;
    }
#if SLUICE_BENCH_CUDART
    const int index = device.size() > 5 ? std::atoi(device.c_str() + 5) : 0;
    check(cudaSetDevice(index));
    check(cudaMalloc(reinterpret_cast<void**>(&device_), bytes_));
    check(cudaMalloc(reinterpret_cast<void**>(&device_copy_), bytes_));
#else
    throw sluice::ConfigError("this build has no CUDA runtime: run on the CPU");
#endif
  }
  ~DeviceBuffer() {
#if SLUICE_BENCH_CUDART
    if (device_ != nullptr) cudaFree(device_);
    if (device_copy_ != nullptr) cudaFree(device_copy_);
#endif
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* data() { return on_host_ ? data_.data() : device_; }
  // Puts the original values back (untimed) so that every round transforms the same batch.
  void reset(const std::vector<float>& values) {
    if (on_host_) {
      std::copy(values.begin(), values.end(), data_.begin());
      return;
    }
#if SLUICE_BENCH_CUDART
    check(cudaMemcpy(device_, values.data(), bytes_, cudaMemcpyHostToDevice));
#endif
  }
  // The baseline: the batch's bytes copied once where they are.
  void copy_once() {
    if (on_host_) {
      std::memcpy(copy_.data(), data_.data(), bytes_);
      return;
    }
#if SLUICE_BENCH_CUDART
    check(cudaMemcpy(device_copy_, device_, bytes_, cudaMemcpyDeviceToDevice));
    check(cudaDeviceSynchronize());
#endif
  }

 private:
#if SLUICE_BENCH_CUDART
  static void check(cudaError_t code) {
    if (code != cudaSuccess) throw sluice::Error(sluice::ErrorKind::internal, cudaGetErrorString(code));
  }
  float* device_ = nullptr;
  float* device_copy_ = nullptr;
#endif
  bool on_host_;
  size_t bytes_;
  std::vector<float> data_, copy_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sluice::model;
  const std::string device = argc > 1 ? argv[1] : "cpu";
  const int batch = argc > 2 ? std::atoi(argv[2]) : 32;
  const int frames = argc > 3 ? std::atoi(argv[3]) : 800;
  const int n_mels = argc > 4 ? std::atoi(argv[4]) : 80;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 50;
  if (device != "cpu") {
    const TorchFacts facts = torch_facts();
    if (facts.cuda_devices == 0) {
      std::printf("bench_feature_transform: skipped: %s asked for but torch %s sees no CUDA device%s\n",
                  device.c_str(), facts.version.c_str(), facts.cuda_build ? "" : " (CPU-only build)");
      return 0;
    }
  }
  set_compute_threads(1);  // as one reader thread of a CPU data rank

  std::vector<float> mels(static_cast<size_t>(batch) * frames * n_mels);
  for (size_t i = 0; i < mels.size(); ++i) mels[i] = -6.0f + static_cast<float>(i % 251) * 0.02f;
  std::vector<int32_t> lens(static_cast<size_t>(batch));
  std::vector<int64_t> indices(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    lens[static_cast<size_t>(b)] = frames / 2 + (b * 37) % (frames / 2 + 1);
    indices[static_cast<size_t>(b)] = 1000 + b;
  }
  FeatureTransformSettings normalise;
  normalise.mean.assign(static_cast<size_t>(n_mels), -4.0f);
  normalise.stddev.assign(static_cast<size_t>(n_mels), 2.0f);
  FeatureTransformSettings masked = normalise;
  masked.masking = {2, 40, 2, 15};

  try {
    DeviceBuffer buffer(device, mels);  // the batch where the transform runs (host or device)
    const MelBatchRef ref{buffer.data(), lens.data(), indices.data(), batch, frames, n_mels};
    const auto time = [&](auto&& work) {
      std::vector<double> seconds;
      for (int round = 0; round < rounds + 3; ++round) {
        buffer.reset(mels);
        const auto start = Clock::now();
        work(round);
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        if (round >= 3) seconds.push_back(elapsed);  // 3 warm-up rounds
      }
      return median(seconds) * 1e6;
    };
    const double copy_us = time([&](int) { buffer.copy_once(); });
    const auto normaliser = make_feature_transform(normalise, device), masker = make_feature_transform(masked, device);
    const double normalise_us = time([&](int round) { normaliser->apply(ref, round, true); });
    const double masked_us = time([&](int round) { masker->apply(ref, round, true); });
    const double megabytes = static_cast<double>(mels.size() * sizeof(float)) / 1e6;
    std::printf("feature transform on %s: batch %d x %d frames x %d mels (%.1f MB), median of %d\n", device.c_str(),
                batch, frames, n_mels, megabytes, rounds);
    std::printf("%-24s%14s%12s%10s\n", "work", "us/batch", "GB/s", "ratio");
    const auto row = [&](const char* name, double us) {
      std::printf("%-24s%14.1f%12.2f%10.2f\n", name, us, megabytes / us * 1e3, us / copy_us);
    };
    row(device == "cpu" ? "copy (memcpy, baseline)" : "copy (d2d, baseline)", copy_us);
    row("normalise", normalise_us);
    row("normalise + masks", masked_us);
  } catch (const sluice::Error& error) {
    std::fprintf(stderr, "bench_feature_transform: %s\n", error.what());
    return 1;
  }
  return 0;
}
