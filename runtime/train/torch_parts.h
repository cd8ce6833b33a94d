#pragma once
// What a train run needs from libtorch, handed to run_train by the process that has it.
//
// sluice_train links no libtorch, so that a Python model rank's process (python/: the `_sluice`
// module and sluice-python) loads none and its script brings whatever framework it likes: any
// torch, JAX, CuPy or NumPy, through DLPack (docs/python.md). `sluice train` (sluice-train,
// commands/train_command.cpp) hands run_train libtorch_parts() (sluice_torch_train,
// libtorch_parts.h). A process without them (TrainOptions::torch null) differs in four places:
//  - the C++ model rank: none; its model side must be its own (TrainOptions::model_side), else
//    run_train refuses before the first batch;
//  - the GPUs of the role plan (model.device cuda): counted by the CUDA runtime this build links
//    (transport::gpu_environment), the devices libtorch's count sees; a build without CUDA refuses;
//  - compute threads: the script's framework sets its own (feed.compute_threads says the share);
//  - feature work on a GPU, and its memory cap: only a data rank does it, and data ranks are
//    sluice-train processes; elsewhere it is a ConfigError.
// The host's feature work (normalisation and masks, model/feature_transform.h) is torch-free and
// the same bits in both.
#include <functional>
#include <memory>

#include "model/feature_transform.h"
#include "runtime/train/model_side.h"

namespace sluice::runtime {

struct TorchParts {
  // The C++ model rank: sluice's model trained over the batch stream (train_model, model_loop.h).
  ModelSide model_loop;
  // CUDA devices libtorch sees (0 in a CPU-only libtorch or without a GPU).
  std::function<int()> cuda_device_count;
  // libtorch's intra-op thread pool for the whole process (threads >= 1).
  std::function<void(int threads)> set_compute_threads;
  // A data rank's feature work on its GPU ("cuda:N"); throws ConfigError where libtorch cannot.
  std::function<std::unique_ptr<model::FeatureTransform>(const model::FeatureTransformSettings& settings, int gpu)>
      gpu_feature_transform;
  // Caps libtorch's CUDA caching allocator on `gpu` at `fraction` of its memory (model::limit_gpu_memory).
  std::function<void(int gpu, double fraction)> limit_gpu_memory;
};

}  // namespace sluice::runtime
