#pragma once
// What libtorch can tell about itself and the devices it sees, and the largest batch that fits a
// CUDA device. No torch in this header (torch is PRIVATE to sluice_model).
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace sluice::model {

struct TorchFacts {
  std::string version;          // e.g. "1.13.0"
  bool cuda_build = false;      // this libtorch was built with CUDA (c10_cuda linked)
  int cuda_devices = 0;         // CUDA devices torch can see now (0 without a GPU or in a CPU build)
  std::string default_device;   // "cuda:0" when a device is visible, else "cpu"
};

// Never throws: a failure to query CUDA reads as zero devices.
TorchFacts torch_facts();

// Caps torch's CUDA caching allocator on `device` at `fraction` of the device's memory (what
// torch.cuda.set_per_process_memory_fraction does): an allocation past it fails with torch's
// out-of-memory error instead of taking memory another rank on the same GPU needs. Memory this
// process allocates outside torch (the transports' slots and upload buffers) is not counted.
// fraction in (0, 1]. Returns the cap in bytes. Throws ConfigError when this libtorch has no
// CUDA or the device is not visible.
int64_t limit_gpu_memory(int device, double fraction);

// `sluice bench max-batch`: the largest batch (samples of `frames` mel frames and `tokens` tokens,
// every sample full length, i.e. the worst case of the longest bucket) for which one training step
// of `model` fits the CUDA device model.device, found by doubling then binary search with the
// caching allocator's out-of-memory error caught, then `margin` taken off (recommended =
// floor(largest * (1 - margin))).
struct MaxBatchRequest {
  ModelConfig model;        // model.device must be "cuda" or "cuda:N"
  OptimizerConfig optimizer;
  int frames = 800;         // padded mel frames per sample (the largest bucket's shape)
  int tokens = 160;         // padded tokens per sample
  int max_batch = 1024;     // search upper bound
  double margin = 0.1;      // fraction of the largest fitting batch kept free
  int steps_per_probe = 2;  // training steps per candidate (the optimiser state appears after the first)
};

struct MaxBatchProbe {
  int batch = 0;
  bool fits = false;
  int64_t peak_allocated_bytes = 0;  // caching allocator, aggregate pool, peak over the probe
  int64_t peak_reserved_bytes = 0;
};

struct MaxBatchResult {
  std::string device_name;
  int64_t device_total_bytes = 0;
  int largest_fitting = 0;   // 0: not even batch 1 fits
  int recommended = 0;       // largest_fitting with the margin taken off (at least 1 when it fits)
  int64_t peak_allocated_bytes = 0;  // at largest_fitting
  std::vector<MaxBatchProbe> probes;  // in the order tried
};

// Throws ConfigError when this libtorch has no CUDA or no CUDA device is visible ("needs a CUDA
// device"), or for an invalid model; other torch errors than out-of-memory propagate as Error.
MaxBatchResult find_max_batch(const MaxBatchRequest& request);

}  // namespace sluice::model
