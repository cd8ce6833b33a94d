#pragma once
// Trainer: the acoustic model, its optimiser and one training step. No torch in this header (the
// implementation holds it, pimpl), so the runtime and launcher compile without libtorch headers.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/batch_view.h"
#include "model/gradient_reducer.h"
#include "model/model_config.h"

namespace sluice::model {

struct StepResult {
  // Losses of this micro-batch (means over its valid frames; not divided by accumulation).
  // mel: L1 before the postnet; postnet: L1 after it; stop: stop-token BCE; loss: their sum.
  // A TorchScript model reports only `loss`; the three parts are NaN for it.
  double loss = 0.0;
  double mel_loss = 0.0;
  double postnet_loss = 0.0;
  double stop_loss = 0.0;
  // Set on the micro-step that closes an accumulation window:
  bool optimizer_stepped = false;  // the parameters were updated
  bool nonfinite_gradient = false;  // the reduced gradient held inf/NaN: update skipped, gradient dropped
  double grad_norm = 0.0;          // global L2 norm of the reduced gradient before clipping (else 0)
  double lr = 0.0;                 // learning rate of the step taken (else of the next step)
  int64_t optimizer_steps = 0;     // optimiser steps taken so far, this one included
  // Host wall-clock seconds (steady_clock). On CUDA they measure host time up to the loss
  // read-back at the end of the step, which waits for the GPU; the split is then approximate.
  double forward_s = 0.0;  // batch checks and host-to-device copies included
  double backward_s = 0.0;
  double allreduce_exposed_s = 0.0;  // after backward until all buckets are reduced
  double optimizer_s = 0.0;          // norm, clipping, AdamW update, gradient reset
  // On CUDA: the step's GPU time, from a CUDA event recorded on torch's stream before its first GPU
  // work (the batch's copies and checks) to one recorded after its last (the optimizer update);
  // gpu_start_s is when the first event was recorded, in seconds after the step began on the host.
  // -1 on the CPU (or when the events failed). The report's "GPU busy" sums gpu_s over the steps.
  double gpu_s = -1.0;
  double gpu_start_s = 0.0;
};

// Owns the model, the AdamW optimiser, the LR schedule and a flat gradient buffer.
//
// Determinism: model weights are initialised from `seed` (same seed => same weights on every
// rank, which is how data-parallel ranks start in sync). Dropout masks of micro-step k on rank r
// come from a generator reseeded with hash(seed, r, k) at the start of every train_step, so they
// depend on nothing but (seed, rank, step): resuming from a checkpoint repeats them exactly, and
// validation_loss() does not perturb training. This reseeds torch's process-wide default
// generators (CPU, and the trainer's CUDA device); nothing else in sluice draws from them.
//
// Not thread-safe: one thread drives a Trainer (the reducer's start() may run on torch's
// autograd thread, see gradient_reducer.h). Errors from torch become sluice::Error.
class Trainer {
 public:
  // `reducer` may be null (single process); when given it must outlive the Trainer.
  // Throws ConfigError for an invalid or unavailable setting (e.g. CUDA without a GPU).
  Trainer(const ModelConfig& model, const OptimizerConfig& optimizer, uint64_t seed,
          GradientReducer* reducer = nullptr);
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Forward and backward of one micro-batch with teacher forcing, accumulating gradients; every
  // accumulation_steps-th call also reduces gradients across ranks (through the reducer),
  // clips them and steps AdamW. Throws DataError for a malformed batch (lengths out of range,
  // token ids outside the vocabulary) and ConfigError for an n_mels or device mismatch, both
  // before touching any state. After any other exception (torch, reducer) the accumulated
  // gradient is undefined: load a checkpoint before training on.
  StepResult train_step(const BatchView& batch);

  // Total loss of `batch` in eval mode without gradients (prenet dropout stays on with a fixed
  // seed, see ModelConfig::prenet_dropout). Deterministic; leaves training state untouched.
  // The value is this rank's alone; average across ranks (GradientReducer::all_reduce_sum) if needed.
  double validation_loss(const BatchView& batch);

  // Model weights, optimiser state, step counters, the seed, any gradient accumulated in an
  // unfinished accumulation window, and the caller's `position` (e.g. epoch and sampler cursor),
  // serialised: the bytes of a checkpoint file. Throws Error (naming the tensor) instead when a
  // parameter or buffer holds inf or NaN: a diverged state is never made into a checkpoint.
  std::string checkpoint_bytes(const nlohmann::json& position) const;
  // checkpoint_bytes() written to `path` atomically (temp file + fsync + rename). Any rank may
  // call it; typically rank 0.
  void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& position) const;

  // Restores everything checkpoint_bytes() wrote and returns `position`. Continuing then gives the
  // same losses, bit for bit on CPU with fixed thread count, as the run that wrote the file.
  // Adopts the checkpoint's seed. Throws ConfigError if the file was written for another model
  // (kind, size, vocabulary, n_mels) or another accumulation window size mid-window; `name`
  // (the file) is what errors call the bytes.
  nlohmann::json load_checkpoint_bytes(const std::string& bytes, const std::string& name);
  // load_checkpoint_bytes() of the file at `path`.
  nlohmann::json load_checkpoint(const std::filesystem::path& path);

  int64_t parameter_count() const;  // trainable scalars
  int64_t optimizer_steps() const;
  int64_t micro_steps() const;
  std::string describe() const;  // one paragraph: model, sizes, parameters, optimiser, buckets

  // All trainable parameters, flattened in the model's parameter order, copied to host. For
  // tests and for checking that ranks hold the same weights.
  std::vector<float> parameters_snapshot() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Sets torch's intra-op CPU thread count for the whole process (bit-exact results on CPU need a
// fixed count). threads >= 1.
// CUDA devices libtorch can see (0 in a CPU-only build or without a GPU).
int cuda_device_count();

void set_compute_threads(int threads);

}  // namespace sluice::model
