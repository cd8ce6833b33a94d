#include "model/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <sstream>
#include <utility>

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>
#include <torch/version.h>

#if SLUICE_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "common/clock.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/kept_until_exit.h"
#include "common/splitmix64.h"
#include "model/acoustic_model.h"

namespace sluice::model {
namespace {

constexpr const char* kCheckpointFormat = "sluice-model-checkpoint-1";

// The GPU time of one training step: a CUDA event on torch's current stream before the step's
// first GPU work and one after its last. Read after the step's loss is back on the host, which
// waits for that stream, so reading adds no synchronisation: two event records and one elapsed-time
// query per step (microseconds against steps of milliseconds). Inactive on the CPU and with a
// CPU-only libtorch; any CUDA error turns it off for good rather than failing a training step.
class StepGpuTimer {
 public:
  // The events are made at the first start(), with the step's device current.
  // SLUICE_GPU_STEP_TIMING=off leaves them out: what bench_train_step compares to measure their cost.
  explicit StepGpuTimer(const torch::Device& device) {
#if SLUICE_TORCH_CUDA
    const char* setting = std::getenv("SLUICE_GPU_STEP_TIMING");
    active_ = device.is_cuda() && !(setting != nullptr && std::string(setting) == "off");
    device_ = device.index() < 0 ? 0 : device.index();
#else
    (void)device;
#endif
  }
  ~StepGpuTimer() {
#if SLUICE_TORCH_CUDA
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (end_ != nullptr) cudaEventDestroy(end_);
#endif
  }
  StepGpuTimer(const StepGpuTimer&) = delete;
  StepGpuTimer& operator=(const StepGpuTimer&) = delete;

  void start() {
#if SLUICE_TORCH_CUDA
    if (active_ && start_ == nullptr) {
      active_ = cudaEventCreate(&start_) == cudaSuccess && cudaEventCreate(&end_) == cudaSuccess;
    }
#endif
    record(start_);
  }
  void stop() { record(end_); }
  // Seconds from start() to stop() on the GPU once both completed, else -1.
  double seconds() {
#if SLUICE_TORCH_CUDA
    if (!active_) return -1;
    float ms = 0;
    if (cudaEventSynchronize(end_) != cudaSuccess || cudaEventElapsedTime(&ms, start_, end_) != cudaSuccess) {
      active_ = false;
      return -1;
    }
    return ms * 1e-3;
#else
    return -1;
#endif
  }

 private:
#if SLUICE_TORCH_CUDA
  void record(cudaEvent_t event) {
    if (active_ && cudaEventRecord(event, c10::cuda::getCurrentCUDAStream(device_).stream()) != cudaSuccess) {
      active_ = false;
    }
  }
  bool active_ = false;
  c10::DeviceIndex device_ = 0;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
#else
  void record(int /*event*/) {}
  int start_ = 0, end_ = 0;
#endif
};


// Seed of micro-step `step` on `rank`; stream 1 is validation (its step is ignored).
uint64_t derived_seed(uint64_t seed, int rank, int64_t step, uint64_t stream) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(rank)) ^ (static_cast<uint64_t>(step) * 2 + stream));
}

void seed_generators(const torch::Device& device, uint64_t seed) {
  auto reseed = [seed](at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  };
  reseed(at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) reseed(at::globalContext().defaultGenerator(device));
}

// bfloat16 autocast for one forward pass on CUDA (the 2.4+ API is per device type).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
    previous_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#else
    at::autocast::set_enabled(previous_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
#endif
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

// The one place where torch's exceptions become sluice errors.
template <class Body>
auto translate_torch_errors(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    const std::string said = e.what_without_backtrace();
    // Memory refused (CUDA's caching allocator: "CUDA out of memory"; the CPU allocator: "can't
    // allocate memory") is the machine's refusal, exit 5 with what to lower, not an internal error.
    // The text stays in the message: bench max-batch looks for "out of memory" in it.
    if (said.find("out of memory") != std::string::npos || said.find("can't allocate memory") != std::string::npos) {
      throw EnvironmentError(std::string("out of memory: the model's ") + what + " could not get memory (" + said +
                             "); lower train.batch_size (or the longest bucket's frames), train in bf16, or give the "
                             "rank more memory: check `ulimit -v`, the job's memory limit (Slurm --mem) and what "
                             "else runs on the node or its GPU");
    }
    throw Error(ErrorKind::internal, std::string("model: ") + what + " failed: " + said);
  }
}

std::string shape_string(const torch::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

}  // namespace

struct Trainer::Impl {
  Impl(const ModelConfig& model_config, const OptimizerConfig& optimizer_config, uint64_t seed,
       GradientReducer* reducer);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  BatchTensors wrap(const BatchView& view) const;
  void check_batch(const BatchTensors& batch, const BatchView& view) const;
  void layout_gradients();
  void install_reduction_hooks();
  void on_gradient_ready(size_t param);
  void launch_bucket(size_t bucket);  // call with hook_mutex held
  double reduce_gradients();          // after a sync backward; returns exposed seconds
  std::string signature() const;

  ModelConfig model_config;
  OptimizerConfig optimizer_config;
  uint64_t seed;
  GradientReducer* reducer;
  int rank = 0;
  int world_size = 1;
  torch::Device device{torch::kCPU};

  std::unique_ptr<StepGpuTimer> gpu_timer;  // StepResult::gpu_s

  std::unique_ptr<AcousticModel> model;
  NamedTensors params;   // trainable, model order
  NamedTensors buffers;  // persistent, model order
  int64_t parameter_count = 0;

  // Every parameter's .grad is a view into flat_grad, laid out in REVERSE parameter order so that
  // each bucket is one contiguous slice. Autograd accumulates into these views in place.
  struct Bucket {
    int64_t offset;
    int64_t count;
    int64_t params;
  };
  torch::Tensor flat_grad;
  torch::Tensor host_staging;  // pinned; CUDA trainer with a host-memory reducer only
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of_param;
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;  // keep hooks alive

  std::unique_ptr<torch::optim::AdamW> optimizer;
  int64_t micro_step = 0;
  int64_t optimizer_step = 0;

  // Backward-time reduction state; hooks may run on torch's autograd thread.
  std::mutex hook_mutex;
  bool reducing = false;
  std::vector<int64_t> pending;  // per bucket: gradients not yet final
  size_t next_bucket = 0;        // buckets start strictly in id order
  std::exception_ptr hook_error;
};

Trainer::Impl::~Impl() {
  // A reduction an error left running may still read and write the gradient buffer (see
  // GradientReducer::in_flight): it is kept for the rest of the process, which is ending.
  if (reducer != nullptr && reducer->in_flight()) {
    keep_until_exit(std::move(flat_grad));
    if (host_staging.defined()) keep_until_exit(std::move(host_staging));
  }
}

Trainer::Impl::Impl(const ModelConfig& model_config_in, const OptimizerConfig& optimizer_config_in,
                    uint64_t seed_in, GradientReducer* reducer_in)
    : model_config(model_config_in), optimizer_config(optimizer_config_in), seed(seed_in), reducer(reducer_in) {
  validate(model_config);
  validate(optimizer_config);
  if (reducer != nullptr) {
    rank = reducer->rank();
    world_size = reducer->world_size();
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw ConfigError("gradient reducer reports rank " + std::to_string(rank) + " of world size " +
                        std::to_string(world_size));
    }
  }
  try {
    device = torch::Device(model_config.device);
  } catch (const c10::Error&) {
    throw ConfigError("model.device '" + model_config.device + "' is not a device; use 'cpu' or 'cuda:N'");
  }
  if (device.is_cuda()) {
    const auto count = static_cast<int>(torch::cuda::device_count());
    if (count == 0) {
      throw ConfigError("model.device is '" + model_config.device +
                        "' but torch sees no CUDA device (CPU-only libtorch or no GPU); use device: cpu");
    }
    if (!device.has_index()) device = torch::Device(torch::kCUDA, 0);
    if (device.index() >= count) {
      throw ConfigError("model.device '" + model_config.device + "' but only " + std::to_string(count) +
                        " CUDA device(s) are visible");
    }
  }

  gpu_timer = std::make_unique<StepGpuTimer>(device);

  // Same seed => same initial weights on every rank.
  seed_generators(device, seed);
  model = model_config.kind == "transformer" ? make_transformer_tts(model_config) : load_torchscript_model(model_config);
  model->to(device);
  model->set_training(true);
  params = model->named_parameters();
  buffers = model->named_buffers();
  if (params.empty()) throw ConfigError("model '" + model->describe() + "' has no trainable parameters");
  for (const auto& [name, param] : params) {
    if (param.scalar_type() != torch::kFloat) {
      throw ConfigError("model parameter '" + name + "' is " + std::string(c10::toString(param.scalar_type())) +
                        "; the trainer keeps float32 weights (use bf16_autocast for bfloat16 compute)");
    }
    parameter_count += param.numel();
  }

  layout_gradients();
  if (reducer != nullptr) install_reduction_hooks();

  // AdamW; no weight decay on vectors and scalars (biases, norms, positional scales).
  std::vector<torch::Tensor> decayed, not_decayed;
  for (const auto& [name, param] : params) (param.dim() >= 2 ? decayed : not_decayed).push_back(param);
  auto options = [this](double weight_decay) {
    return torch::optim::AdamWOptions(optimizer_config.lr)
        .betas({optimizer_config.betas[0], optimizer_config.betas[1]})
        .eps(optimizer_config.eps)
        .weight_decay(weight_decay);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decayed.empty()) {
    groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(options(optimizer_config.weight_decay)));
  }
  if (!not_decayed.empty()) {
    groups.emplace_back(not_decayed, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
  }
  optimizer = std::make_unique<torch::optim::AdamW>(std::move(groups), options(optimizer_config.weight_decay));
}

void Trainer::Impl::layout_gradients() {
  const int64_t cap = reducer != nullptr
                          ? std::max<int64_t>(1, static_cast<int64_t>(reducer->bucket_bytes() / sizeof(float)))
                          : std::numeric_limits<int64_t>::max();
  flat_grad = torch::zeros({parameter_count}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  bucket_of_param.assign(params.size(), 0);
  int64_t offset = 0;
  for (size_t i = params.size(); i-- > 0;) {
    auto& param = params[i].second;
    const int64_t numel = param.numel();
    if (buckets.empty() || (buckets.back().count > 0 && buckets.back().count + numel > cap)) {
      buckets.push_back({offset, 0, 0});
    }
    buckets.back().count += numel;
    buckets.back().params += 1;
    bucket_of_param[i] = buckets.size() - 1;
    param.mutable_grad() = flat_grad.narrow(0, offset, numel).view(param.sizes());
    offset += numel;
  }
  if (device.is_cuda() && reducer != nullptr && !reducer->accepts_device_memory()) {
    host_staging = torch::empty({parameter_count}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
  }
}

// A post-hook on each parameter's gradient accumulator runs once per backward, after the new
// gradient has been added into the parameter's slice of flat_grad: that is when it is final.
void Trainer::Impl::install_reduction_hooks() {
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i].second);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        }));
    grad_accumulators.push_back(std::move(accumulator));
  }
}

void Trainer::Impl::on_gradient_ready(size_t param) {
  std::lock_guard<std::mutex> lock(hook_mutex);
  if (!reducing || hook_error) return;
  --pending[bucket_of_param[param]];
  while (next_bucket < buckets.size() && pending[next_bucket] <= 0) launch_bucket(next_bucket++);
}

void Trainer::Impl::launch_bucket(size_t bucket) {
  if (hook_error) return;
  try {
    const Bucket& b = buckets[bucket];
    auto slice = flat_grad.narrow(0, b.offset, b.count);
    float* data = slice.data_ptr<float>();
    if (host_staging.defined()) {
      auto host = host_staging.narrow(0, b.offset, b.count);
      host.copy_(slice);  // synchronous: ordered after the kernels that produced the gradient
      data = host.data_ptr<float>();
    } else if (device.is_cuda()) {
      torch::cuda::synchronize(device.index());
    }
    reducer->start(static_cast<int>(bucket), data, static_cast<size_t>(b.count));
  } catch (...) {
    hook_error = std::current_exception();
  }
}

double Trainer::Impl::reduce_gradients() {
  const auto begin = Clock::now();
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    reducing = false;
    while (next_bucket < buckets.size()) launch_bucket(next_bucket++);  // unused parameters
  }
  reducer->wait_all();
  if (hook_error) std::rethrow_exception(std::exchange(hook_error, nullptr));
  if (host_staging.defined()) flat_grad.copy_(host_staging);
  if (world_size > 1) flat_grad.div_(static_cast<double>(world_size));
  return seconds_between(begin, Clock::now());
}

BatchTensors Trainer::Impl::wrap(const BatchView& view) const {
  if (view.tokens == nullptr || view.token_lens == nullptr || view.mels == nullptr || view.mel_lens == nullptr) {
    throw DataError("model: batch has a null buffer pointer");
  }
  if (view.batch_size < 1 || view.max_tokens < 1 || view.max_frames < 1) {
    throw DataError("model: batch shape must be positive, got batch_size " + std::to_string(view.batch_size) +
                    ", max_tokens " + std::to_string(view.max_tokens) + ", max_frames " +
                    std::to_string(view.max_frames));
  }
  if (view.n_mels != model_config.n_mels) {
    throw ConfigError("model: batch has " + std::to_string(view.n_mels) + " mel channels but model.n_mels is " +
                      std::to_string(model_config.n_mels) + "; make them match the feature cache");
  }
  if (view.on_device && !device.is_cuda()) {
    throw ConfigError("model: batch is on a device but the trainer runs on " + model_config.device);
  }
  const auto where = view.on_device ? device : torch::Device(torch::kCPU);
  const auto ints = torch::TensorOptions().dtype(torch::kInt).device(where);
  const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(where);
  // from_blob never copies; the const_casts are safe because nothing writes to these tensors.
  BatchTensors batch;
  batch.tokens = torch::from_blob(const_cast<int32_t*>(view.tokens), {view.batch_size, view.max_tokens}, ints);
  batch.token_lens = torch::from_blob(const_cast<int32_t*>(view.token_lens), {view.batch_size}, ints);
  batch.mels = torch::from_blob(const_cast<float*>(view.mels), {view.batch_size, view.max_frames, view.n_mels}, floats);
  batch.mel_lens = torch::from_blob(const_cast<int32_t*>(view.mel_lens), {view.batch_size}, ints);
  if (batch.mels.device() != device) batch.mels = batch.mels.to(device);  // host batch, CUDA trainer
  batch.tokens = batch.tokens.to(device, torch::kLong);
  batch.token_lens = batch.token_lens.to(device, torch::kLong);
  batch.mel_lens = batch.mel_lens.to(device, torch::kLong);
  check_batch(batch, view);
  return batch;
}

// One device-side reduction and one read-back; the slow path only runs to name the culprit.
void Trainer::Impl::check_batch(const BatchTensors& batch, const BatchView& view) const {
  auto bad_lengths = (batch.token_lens < 1) | (batch.token_lens > view.max_tokens) | (batch.mel_lens < 1) |
                     (batch.mel_lens > view.max_frames);
  auto bad = bad_lengths.any();
  torch::Tensor bad_tokens;
  const bool check_vocabulary = model_config.kind == "transformer";
  if (check_vocabulary) {
    auto valid = torch::arange(view.max_tokens, batch.tokens.options()).unsqueeze(0) < batch.token_lens.unsqueeze(1);
    bad_tokens = (valid & ((batch.tokens < 0) | (batch.tokens >= model_config.vocab_size))).any(1);
    bad = bad | bad_tokens.any();
  }
  if (!bad.item<bool>()) return;
  auto token_lens = batch.token_lens.cpu();
  auto mel_lens = batch.mel_lens.cpu();
  auto token_flags = check_vocabulary ? bad_tokens.cpu() : torch::zeros({view.batch_size}, torch::kBool);
  for (int64_t b = 0; b < view.batch_size; ++b) {
    const int64_t tl = token_lens[b].item<int64_t>(), ml = mel_lens[b].item<int64_t>();
    if (tl < 1 || tl > view.max_tokens || ml < 1 || ml > view.max_frames) {
      throw DataError("model: batch sample " + std::to_string(b) + " has token_len " + std::to_string(tl) +
                      " (max_tokens " + std::to_string(view.max_tokens) + ") and mel_len " + std::to_string(ml) +
                      " (max_frames " + std::to_string(view.max_frames) + "); lengths must be in [1, max]");
    }
    if (token_flags[b].item<bool>()) {
      throw DataError("model: batch sample " + std::to_string(b) + " has a token id outside [0, " +
                      std::to_string(model_config.vocab_size) +
                      "); model.vocab_size must cover the text frontend's symbol table");
    }
  }
}

std::string Trainer::Impl::signature() const {
  std::ostringstream out;
  out << model_config.kind;
  if (model_config.kind == "transformer") out << " " << model_config.size;
  out << ", vocab " << model_config.vocab_size << ", n_mels " << model_config.n_mels << ", " << params.size()
      << " tensors, " << parameter_count << " parameters";
  uint64_t hash = 0;
  for (const auto& [name, param] : params) {
    hash = splitmix64(hash ^ std::hash<std::string>{}(name + shape_string(param)));
  }
  out << ", layout " << std::hex << hash;
  return out.str();
}

Trainer::Trainer(const ModelConfig& model, const OptimizerConfig& optimizer, uint64_t seed, GradientReducer* reducer)
    : impl_(translate_torch_errors("building the trainer",
                                   [&] { return std::make_unique<Impl>(model, optimizer, seed, reducer); })) {}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

StepResult Trainer::train_step(const BatchView& view) {
  return translate_torch_errors("train_step", [&] {
    Impl& s = *impl_;
    StepResult result;
    const auto t_begin = Clock::now();
    c10::OptionalDeviceGuard device_guard;
    if (s.device.is_cuda()) device_guard.reset_device(s.device);
    s.gpu_timer->start();
    const auto t_gpu_start = Clock::now();
    const bool sync = (s.micro_step + 1) % s.optimizer_config.accumulation_steps == 0;

    BatchTensors batch = s.wrap(view);
    seed_generators(s.device, derived_seed(s.seed, s.rank, s.micro_step, 0));
    s.model->set_training(true);
    LossTerms terms;
    {
      AutocastScope autocast(s.model_config.bf16_autocast);
      terms = s.model->loss(batch);
    }
    const auto t_forward = Clock::now();

    if (s.reducer != nullptr && sync) {
      std::lock_guard<std::mutex> lock(s.hook_mutex);
      s.pending.clear();
      for (const auto& bucket : s.buckets) s.pending.push_back(bucket.params);
      s.next_bucket = 0;
      s.hook_error = nullptr;
      s.reducing = true;
    }
    try {
      (terms.total / static_cast<double>(s.optimizer_config.accumulation_steps)).backward();
    } catch (...) {
      if (s.reducer != nullptr && sync) {
        {
          std::lock_guard<std::mutex> lock(s.hook_mutex);
          s.reducing = false;
        }
        try {
          s.reducer->wait_all();  // buckets already started must finish before the buffer is reused
        } catch (...) {
        }
      }
      throw;
    }
    const auto t_backward = Clock::now();
    ++s.micro_step;

    auto t_reduced = t_backward;
    if (sync) {
      if (s.reducer != nullptr) {
        s.reduce_gradients();
        t_reduced = Clock::now();
      }
      const double norm = s.flat_grad.norm().item<double>();
      result.grad_norm = norm;
      if (!std::isfinite(norm)) {
        result.nonfinite_gradient = true;
        result.lr = learning_rate(s.optimizer_config, s.optimizer_step + 1);
      } else {
        const double clip = s.optimizer_config.grad_clip_norm;
        if (clip > 0.0 && norm > clip) s.flat_grad.mul_(clip / (norm + 1e-6));
        result.lr = learning_rate(s.optimizer_config, s.optimizer_step + 1);
        for (auto& group : s.optimizer->param_groups()) {
          static_cast<torch::optim::AdamWOptions&>(group.options()).lr(result.lr);
        }
        s.optimizer->step();
        ++s.optimizer_step;
        result.optimizer_stepped = true;
      }
      s.flat_grad.zero_();
    } else {
      result.lr = learning_rate(s.optimizer_config, s.optimizer_step + 1);
    }
    result.optimizer_steps = s.optimizer_step;
    s.gpu_timer->stop();

    auto read = [](const torch::Tensor& value) {
      return value.defined() ? value.item<double>() : std::numeric_limits<double>::quiet_NaN();
    };
    result.loss = read(terms.total);
    result.mel_loss = read(terms.mel);
    result.postnet_loss = read(terms.postnet);
    result.stop_loss = read(terms.stop);
    const auto t_end = Clock::now();
    result.gpu_s = s.gpu_timer->seconds();  // the reads above waited for the stream
    result.gpu_start_s = seconds_between(t_begin, t_gpu_start);
    result.forward_s = seconds_between(t_begin, t_forward);
    result.backward_s = seconds_between(t_forward, t_backward);
    result.allreduce_exposed_s = seconds_between(t_backward, t_reduced);
    result.optimizer_s = sync ? seconds_between(t_reduced, t_end) : 0.0;
    return result;
  });
}

double Trainer::validation_loss(const BatchView& view) {
  return translate_torch_errors("validation_loss", [&] {
    Impl& s = *impl_;
    c10::OptionalDeviceGuard device_guard;
    if (s.device.is_cuda()) device_guard.reset_device(s.device);
    BatchTensors batch = s.wrap(view);
    torch::NoGradGuard no_grad;
    // Fixed seed: the (prenet) dropout masks, and so the value, repeat for the same weights and
    // batch. train_step reseeds before its own draws, so this does not perturb training.
    seed_generators(s.device, derived_seed(s.seed, s.rank, 0, 1));
    s.model->set_training(false);
    LossTerms terms;
    {
      AutocastScope autocast(s.model_config.bf16_autocast);
      terms = s.model->loss(batch);
    }
    s.model->set_training(true);
    return terms.total.item<double>();
  });
}

namespace {

// The first tensor of `tensors` holding inf or NaN, by name; empty when all are finite.
std::string first_nonfinite(const NamedTensors& tensors) {
  for (const auto& [name, tensor] : tensors) {
    if (tensor.is_floating_point() && !torch::isfinite(tensor).all().item<bool>()) return name;
  }
  return "";
}

}  // namespace

std::string Trainer::checkpoint_bytes(const nlohmann::json& position) const {
  return translate_torch_errors("save_checkpoint", [&] {
    const Impl& s = *impl_;
    // A diverged state is never written: a checkpoint is what a resume trusts.
    std::string bad = first_nonfinite(s.params);
    if (bad.empty()) bad = first_nonfinite(s.buffers);
    if (!bad.empty()) {
      throw Error(ErrorKind::internal, "model: refusing to write a checkpoint at " + position.dump() + ": '" + bad +
                                           "' holds inf or NaN (training diverged); the earlier checkpoints are kept");
    }
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(std::string(kCheckpointFormat)));
    archive.write("signature", c10::IValue(s.signature()));
    archive.write("seed", c10::IValue(static_cast<int64_t>(s.seed)));
    archive.write("micro_step", c10::IValue(s.micro_step));
    archive.write("optimizer_step", c10::IValue(s.optimizer_step));
    archive.write("accumulation_steps", c10::IValue(static_cast<int64_t>(s.optimizer_config.accumulation_steps)));
    archive.write("position", c10::IValue(position.dump()));
    for (size_t i = 0; i < s.params.size(); ++i) {
      archive.write("param_" + std::to_string(i), s.params[i].second.detach(), /*is_buffer=*/true);
    }
    for (size_t i = 0; i < s.buffers.size(); ++i) {
      archive.write("buffer_" + std::to_string(i), s.buffers[i].second.detach(), /*is_buffer=*/true);
    }
    // Mid-window: the gradient accumulated so far is part of the state.
    if (s.micro_step % s.optimizer_config.accumulation_steps != 0) {
      archive.write("accumulated_grad", s.flat_grad, /*is_buffer=*/true);
    }
    torch::serialize::OutputArchive optimizer_archive;
    s.optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    std::ostringstream stream;
    archive.save_to(stream);
    return stream.str();
  });
}

void Trainer::save_checkpoint(const std::filesystem::path& path, const nlohmann::json& position) const {
  write_file_atomically(path, checkpoint_bytes(position));
}

nlohmann::json Trainer::load_checkpoint(const std::filesystem::path& path) {
  return load_checkpoint_bytes(read_file(path), path.string());
}

nlohmann::json Trainer::load_checkpoint_bytes(const std::string& bytes, const std::string& name) {
  return translate_torch_errors("load_checkpoint", [&] {
    Impl& s = *impl_;
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(bytes.data(), bytes.size(), s.device);
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::internal, "model: cannot read checkpoint " + name + ": " +
                                           e.what_without_backtrace() + " (is it a file written by save_checkpoint?)");
    }
    auto read_value = [&](const char* key) {
      c10::IValue value;
      if (!archive.try_read(key, value)) {
        throw Error(ErrorKind::internal, "model: checkpoint " + name + " lacks '" + key +
                                             "'; it was not written by sluice's save_checkpoint");
      }
      return value;
    };
    if (read_value("format").toStringRef() != kCheckpointFormat) {
      throw Error(ErrorKind::internal, "model: checkpoint " + name + " has format '" +
                                           read_value("format").toStringRef() + "', expected " + kCheckpointFormat);
    }
    const std::string saved_signature = read_value("signature").toStringRef();
    if (saved_signature != s.signature()) {
      throw ConfigError("model: checkpoint " + name + " was written for model [" + saved_signature +
                        "] but this trainer is [" + s.signature() + "]; use the same model settings");
    }
    const int64_t micro_step = read_value("micro_step").toInt();
    const int64_t saved_accumulation = read_value("accumulation_steps").toInt();
    const bool mid_window = micro_step % saved_accumulation != 0;
    if (mid_window && saved_accumulation != s.optimizer_config.accumulation_steps) {
      throw ConfigError("model: checkpoint " + name + " was saved inside an accumulation window of " +
                        std::to_string(saved_accumulation) + " micro-steps but optimizer.accumulation_steps is " +
                        std::to_string(s.optimizer_config.accumulation_steps) + "; keep it or resume from another checkpoint");
    }

    torch::NoGradGuard no_grad;
    auto restore = [&](NamedTensors& targets, const std::string& prefix) {
      for (size_t i = 0; i < targets.size(); ++i) {
        torch::Tensor saved;
        archive.read(prefix + std::to_string(i), saved, /*is_buffer=*/true);
        targets[i].second.copy_(saved);
      }
    };
    restore(s.params, "param_");
    restore(s.buffers, "buffer_");
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    s.optimizer->load(optimizer_archive);
    if (mid_window) {
      torch::Tensor grad;
      archive.read("accumulated_grad", grad, /*is_buffer=*/true);
      s.flat_grad.copy_(grad);
    } else {
      s.flat_grad.zero_();
    }
    s.micro_step = micro_step;
    s.optimizer_step = read_value("optimizer_step").toInt();
    s.seed = static_cast<uint64_t>(read_value("seed").toInt());
    return nlohmann::json::parse(read_value("position").toStringRef());
  });
}

int64_t Trainer::parameter_count() const { return impl_->parameter_count; }
int64_t Trainer::optimizer_steps() const { return impl_->optimizer_step; }
int64_t Trainer::micro_steps() const { return impl_->micro_step; }

std::string Trainer::describe() const {
  const Impl& s = *impl_;
  const OptimizerConfig& o = s.optimizer_config;
  std::ostringstream out;
  out << s.model->describe() << "; " << s.parameter_count << " parameters in " << s.params.size()
      << " tensors on " << s.device << (s.model_config.bf16_autocast ? " (bf16 autocast)" : "") << "; AdamW lr "
      << o.lr << " betas " << o.betas[0] << "/" << o.betas[1] << " weight decay " << o.weight_decay << ", warmup "
      << o.warmup_steps << " then " << o.decay << ", clip " << o.grad_clip_norm << ", accumulation "
      << o.accumulation_steps;
  if (s.reducer != nullptr) {
    out << "; gradients reduced over " << s.world_size << " ranks in " << s.buckets.size() << " bucket(s) of <= "
        << s.reducer->bucket_bytes() << " bytes";
  }
  return out.str();
}

std::vector<float> Trainer::parameters_snapshot() const {
  return translate_torch_errors("parameters_snapshot", [&] {
    std::vector<torch::Tensor> flat;
    for (const auto& [name, param] : impl_->params) flat.push_back(param.detach().reshape({-1}));
    auto all = torch::cat(flat).to(torch::kCPU).contiguous();
    return std::vector<float>(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
  });
}

int cuda_device_count() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

void set_compute_threads(int threads) {
  if (threads < 1) throw ConfigError("compute threads must be >= 1, got " + std::to_string(threads));
  torch::set_num_threads(threads);
}

}  // namespace sluice::model
