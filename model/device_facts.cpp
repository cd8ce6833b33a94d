#include "model/device_facts.h"

#include <algorithm>
#include <cmath>

#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/version.h>

#if SLUICE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"
#include "model/trainer.h"

namespace sluice::model {

TorchFacts torch_facts() {
  TorchFacts facts;
  facts.version = TORCH_VERSION;
  facts.cuda_build = SLUICE_TORCH_CUDA != 0;
  try {
    facts.cuda_devices = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  } catch (const std::exception&) {
    facts.cuda_devices = 0;
  }
  facts.default_device = facts.cuda_devices > 0 ? "cuda:0" : "cpu";
  return facts;
}

#if SLUICE_TORCH_CUDA
namespace {
// The caching allocator learns the device count on torch's lazy CUDA initialisation, and until then
// refuses every call naming a device ("Invalid device argument", seen on the H100 with torch
// 2.11): a first tensor on the device triggers it.
void initialize_allocator(int device) {
  (void)torch::empty({1}, torch::TensorOptions().device(torch::Device(torch::kCUDA, static_cast<int16_t>(device))));
}
}  // namespace
#endif

int64_t limit_gpu_memory(int device, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw ConfigError("GPU memory fraction " + std::to_string(fraction) + " is outside (0, 1]");
  }
  const TorchFacts facts = torch_facts();
  if (!facts.cuda_build || device < 0 || device >= facts.cuda_devices) {
    throw ConfigError("a GPU memory fraction for device " + std::to_string(device) + ", but " +
                      (facts.cuda_build ? "torch sees " + std::to_string(facts.cuda_devices) + " CUDA device(s)"
                                        : "this libtorch (" + facts.version + ") was built without CUDA"));
  }
#if SLUICE_TORCH_CUDA
  // The cap applies from the very first allocation that matters.
  initialize_allocator(device);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
  size_t free_bytes = 0, total_bytes = 0;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  return static_cast<int64_t>(static_cast<double>(total_bytes) * fraction);
#else
  return 0;
#endif
}

namespace {

// A worst-case batch: every sample as long as the padded shape (no padding to skip).
struct SyntheticBatch {
  std::vector<int32_t> tokens, token_lens, mel_lens;
  std::vector<float> mels;
  BatchView view;

  SyntheticBatch(int batch, int max_tokens, int max_frames, int n_mels, int vocab) {
    tokens.resize(static_cast<size_t>(batch) * max_tokens);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 1 + static_cast<int32_t>(i % static_cast<size_t>(vocab - 1));
    token_lens.assign(static_cast<size_t>(batch), max_tokens);
    mel_lens.assign(static_cast<size_t>(batch), max_frames);
    mels.resize(static_cast<size_t>(batch) * max_frames * n_mels);
    for (size_t i = 0; i < mels.size(); ++i) mels[i] = -5.0f + static_cast<float>(i % 97) * 0.05f;
    view.tokens = tokens.data();
    view.token_lens = token_lens.data();
    view.mels = mels.data();
    view.mel_lens = mel_lens.data();
    view.batch_size = batch;
    view.max_tokens = max_tokens;
    view.max_frames = max_frames;
    view.n_mels = n_mels;
  }
};

#if SLUICE_TORCH_CUDA
// The caching allocator's c10::OutOfMemoryError ("CUDA out of memory. Tried to allocate ...") and
// a raw cudaErrorMemoryAllocation ("CUDA error: out of memory"), as Trainer passes them on.
bool is_out_of_memory(const std::exception& error) {
  return std::string(error.what()).find("out of memory") != std::string::npos;
}
#endif

}  // namespace

MaxBatchResult find_max_batch(const MaxBatchRequest& request) {
  if (request.model.device.rfind("cuda", 0) != 0) {
    throw ConfigError("sluice bench max-batch needs a CUDA device: model.device is '" + request.model.device +
                      "'; run it on a GPU node with --set model.device=cuda");
  }
  const TorchFacts facts = torch_facts();
  if (!facts.cuda_build || facts.cuda_devices == 0) {
    throw ConfigError(std::string("sluice bench max-batch needs a CUDA device, and ") +
                      (facts.cuda_build ? "torch sees none on this machine"
                                        : "this libtorch (" + facts.version + ") was built without CUDA") +
                      "; run it on the GPU node (the largest batch is a property of the GPU's memory)");
  }
  if (request.frames < 1 || request.tokens < 1 || request.max_batch < 1 || request.margin < 0 || request.margin >= 1) {
    throw ConfigError("max-batch: frames, tokens and max batch must be >= 1 and the margin in [0, 1)");
  }
#if SLUICE_TORCH_CUDA
  const int device = request.model.device.size() > 5 ? std::stoi(request.model.device.substr(5)) : 0;
  MaxBatchResult result;
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) == cudaSuccess) {
    result.device_name = properties.name;
    result.device_total_bytes = static_cast<int64_t>(properties.totalGlobalMem);
  }
  initialize_allocator(device);
  // One candidate: a fresh trainer (weights, gradients, AdamW state) and steps_per_probe steps.
  auto probe = [&](int batch) {
    MaxBatchProbe outcome;
    outcome.batch = batch;
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    try {
      SyntheticBatch data(batch, request.tokens, request.frames, request.model.n_mels, request.model.vocab_size);
      Trainer trainer(request.model, request.optimizer, 1);
      for (int step = 0; step < std::max(1, request.steps_per_probe); ++step) trainer.train_step(data.view);
      outcome.fits = true;
    } catch (const Error& error) {
      if (error.kind() == ErrorKind::config || !is_out_of_memory(error)) throw;
    }
    // Index 0 of each StatArray is the aggregate over the small and large pools.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    outcome.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    outcome.peak_reserved_bytes = stats.reserved_bytes[0].peak;
    c10::cuda::CUDACachingAllocator::emptyCache();
    result.probes.push_back(outcome);
    return outcome;
  };
  // Doubling until a failure or the bound, then bisection between the last fit and the failure.
  int low = 0, high = 0;
  for (int batch = 1;; batch = std::min(batch * 2, request.max_batch)) {
    const MaxBatchProbe outcome = probe(batch);
    if (!outcome.fits) {
      high = batch;
      break;
    }
    low = batch;
    result.peak_allocated_bytes = outcome.peak_allocated_bytes;
    if (batch == request.max_batch) break;
  }
  while (high > 0 && high - low > 1) {
    const int middle = low + (high - low) / 2;
    const MaxBatchProbe outcome = probe(middle);
    if (outcome.fits) {
      low = middle;
      result.peak_allocated_bytes = outcome.peak_allocated_bytes;
    } else {
      high = middle;
    }
  }
  result.largest_fitting = low;
  result.recommended = low == 0 ? 0 : std::max(1, static_cast<int>(std::floor(low * (1.0 - request.margin))));
  return result;
#else
  throw ConfigError("sluice bench max-batch needs libtorch with CUDA");
#endif
}

}  // namespace sluice::model
