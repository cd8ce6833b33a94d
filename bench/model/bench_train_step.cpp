// bench_train_step [size] [batch] [frames] [n_mels] [steps] [threads] [world_size]
//                  [--device cpu|cuda|cuda:N] [--bf16 on|off] [--table tiny,small,base]
// Defaults: tiny 8 400 80 20 2 1 on cpu, bf16 off. Prints per-step time split and the median;
// world_size > 1 runs the bucketed reduction through an in-process LoopbackReducer. On a CUDA
// device it also prints the throughput: samples/s and mel frames/s (valid frames, i.e. without
// padding) over the timed steps.
//
// --table SIZES: one row per model size (same batch, device and bf16), no per-step lines; what
// bench/model/bench_model_gpu.sh runs on the GPU machine. A CUDA device that torch cannot see is
// not an error: the benchmark says why and exits 0 (skipped), so it can run anywhere.
//
// Steps 0 and 1 are warm-up (allocator, autotuning) and not timed. Throughput is timed on the host
// clock over the remaining steps back to back; each step ends in a read-back of its loss and
// gradient norm, which waits for the GPU, so only the last step's optimiser kernels may still run
// when the clock stops.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/device_facts.h"
#include "model/loopback_reducer.h"
#include "model/trainer.h"
#include "model_test_util.h"
#include "runtime/transport/gpu_facts.h"

namespace {

using namespace sluice::model;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string size = "tiny";
  int batch = 8;
  int frames = 400;
  int n_mels = 80;
  int steps = 20;
  int threads = 2;
  int world = 1;
  std::string device = "cpu";
  bool bf16 = false;
  std::vector<std::string> table;  // sizes; empty: one size with per-step lines
  bool events_ab = false;          // --events-ab: the CUDA step events' cost, A/B in one process
};

struct Measurement {
  std::string size;
  int64_t parameters = 0;
  double median_step_s = 0.0;  // of the timed steps (forward + backward + reduce + optimiser)
  double samples_per_s = 0.0;
  double valid_frames_per_s = 0.0;
  double padded_frames_per_s = 0.0;
  double flops_per_s = 0.0;     // the model's training FLOPs (transformer_training_flops) per second
  double gpu_busy = -1.0;       // GPU time of the timed steps (CUDA events) / their wall time; -1 on the CPU
};

// Dense bf16 tensor-core peak of the GPU named `name`, FLOP/s (NVIDIA's data sheets); 0 when unknown.
double bf16_peak_flops(const std::string& name) {
  if (name.find("H100") != std::string::npos) return name.find("PCIe") != std::string::npos ? 756e12 : 989.4e12;
  if (name.find("H200") != std::string::npos) return 989.4e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

constexpr int warmup_steps = 2;

int usage() {
  std::fprintf(stderr,
               "usage: bench_train_step [size] [batch] [frames] [n_mels] [steps] [threads] [world_size] "
               "[--device cpu|cuda|cuda:N] [--bf16 on|off] [--table tiny,small,base] [--events-ab on]\n");
  return 2;
}

bool parse(int argc, char** argv, Options& o) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (arg == "--device") {
      o.device = value;
    } else if (arg == "--bf16" && (value == "on" || value == "off")) {
      o.bf16 = value == "on";
    } else if (arg == "--events-ab" && (value == "on" || value == "off")) {
      o.events_ab = value == "on";
    } else if (arg == "--table") {
      std::stringstream list(value);
      for (std::string size; std::getline(list, size, ',');) {
        if (!size.empty()) o.table.push_back(size);
      }
      if (o.table.empty()) return false;
    } else {
      return false;
    }
  }
  if (positional.size() > 7) return false;
  auto number = [&](size_t index, int fallback) {
    return positional.size() > index ? std::atoi(positional[index].c_str()) : fallback;
  };
  if (!positional.empty()) o.size = positional[0];
  o.batch = number(1, o.batch);
  o.frames = number(2, o.frames);
  o.n_mels = number(3, o.n_mels);
  o.steps = number(4, o.steps);
  o.threads = number(5, o.threads);
  o.world = number(6, o.world);
  return o.batch > 0 && o.frames > 0 && o.n_mels > 0 && o.steps > 0 && o.threads > 0 && o.world > 0;
}

bool on_cuda(const Options& o) { return o.device.rfind("cuda", 0) == 0; }

// "cuda" -> 0, "cuda:1" -> 1.
int cuda_index(const std::string& device) {
  const size_t colon = device.find(':');
  return colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
}

// The name of the CUDA device the options ask for ("NVIDIA H100 80GB HBM3"); "" on the CPU or
// when no visible device has that index.
std::string gpu_name(const Options& o) {
  if (!on_cuda(o)) return "";
  for (const auto& gpu : sluice::transport::gpu_environment().gpus) {
    if (gpu.index == cuda_index(o.device)) return gpu.name;
  }
  return "";
}

// "cuda:0 (NVIDIA H100 80GB HBM3)" or "cpu".
std::string describe_device(const Options& o) {
  if (!on_cuda(o)) return o.device;
  const std::string name = gpu_name(o);
  return "cuda:" + std::to_string(cuda_index(o.device)) + (name.empty() ? "" : " (" + name + ")");
}

// Why the run cannot happen on the requested device ("" when it can).
std::string skip_reason(const Options& o) {
  if (!on_cuda(o)) return "";
  const TorchFacts facts = torch_facts();
  if (!facts.cuda_build) {
    return "this libtorch (" + facts.version + ") is a CPU-only build; build against a CUDA torch (pip torch's "
           "torch.utils.cmake_prefix_path)";
  }
  if (facts.cuda_devices == 0) return "torch sees no CUDA device (no GPU here, or CUDA_VISIBLE_DEVICES hides it)";
  if (cuda_index(o.device) >= facts.cuda_devices) {
    return o.device + " requested but torch sees " + std::to_string(facts.cuda_devices) + " CUDA device(s)";
  }
  return "";
}

// The synthetic batch's tokens: a fifth of its frames.
int tokens_of(const Options& o) { return std::max(8, o.frames / 5); }

// The model of `size` as the options set it up (vocabulary 100).
ModelConfig model_of(const Options& o, const std::string& size) {
  ModelConfig model;
  model.size = size;
  model.n_mels = o.n_mels;
  model.vocab_size = 100;
  model.device = o.device;
  model.bf16_autocast = o.bf16;
  return model;
}

OptimizerConfig optimizer_of() {
  OptimizerConfig optimizer;
  optimizer.warmup_steps = 100;
  return optimizer;
}

Measurement measure(const Options& o, const std::string& size, bool print_steps) {
  const int tokens = tokens_of(o);
  const ModelConfig model = model_of(o, size);
  const OptimizerConfig optimizer = optimizer_of();
  std::unique_ptr<LoopbackReducer> reducer;
  if (o.world > 1) reducer = std::make_unique<LoopbackReducer>(o.world);
  Trainer trainer(model, optimizer, 1, reducer.get());
  if (print_steps) {
    std::printf("%s\nbatch %d x %d frames x %d mels, %d tokens, %d threads\n", trainer.describe().c_str(), o.batch,
                o.frames, o.n_mels, tokens, o.threads);
  }

  const auto data = testing::make_batch(o.batch, tokens, o.frames, o.n_mels, model.vocab_size, 1);
  int64_t valid_frames = 0;
  for (const int32_t length : data.mel_lens) valid_frames += length;
  std::vector<double> totals;
  double gpu_s = 0;
  bool gpu_timed = true;
  Clock::time_point window_start = Clock::now();
  for (int step = 0; step < o.steps; ++step) {
    if (step == warmup_steps) window_start = Clock::now();
    const StepResult r = trainer.train_step(data.view());
    if (step >= warmup_steps || o.steps <= warmup_steps) {
      gpu_s += r.gpu_s;
      gpu_timed = gpu_timed && r.gpu_s >= 0;
    }
    const double total = r.forward_s + r.backward_s + r.allreduce_exposed_s + r.optimizer_s;
    totals.push_back(total);
    if (print_steps) {
      std::printf("step %3d loss %.4f (mel %.4f postnet %.4f stop %.4f) | %.3f s = fwd %.3f + bwd %.3f + reduce %.3f + opt %.3f\n",
                  step, r.loss, r.mel_loss, r.postnet_loss, r.stop_loss, total, r.forward_s, r.backward_s,
                  r.allreduce_exposed_s, r.optimizer_s);
    }
  }
  const double window_s = std::chrono::duration<double>(Clock::now() - window_start).count();
  const int first_timed = o.steps > warmup_steps ? warmup_steps : 0;
  const int timed = o.steps - first_timed;
  std::vector<double> sorted(totals.begin() + first_timed, totals.end());  // skip warm-up steps
  std::sort(sorted.begin(), sorted.end());
  if (print_steps) {
    std::printf("median step %.3f s, min %.3f s, max %.3f s (steps %d..%d)\n", sorted[sorted.size() / 2],
                sorted.front(), sorted.back(), first_timed, o.steps - 1);
  }

  Measurement m;
  m.size = size;
  m.parameters = trainer.parameter_count();
  m.median_step_s = sorted[sorted.size() / 2];
  m.samples_per_s = static_cast<double>(o.batch) * timed / window_s;
  m.valid_frames_per_s = static_cast<double>(valid_frames) * timed / window_s;
  m.padded_frames_per_s = static_cast<double>(o.batch) * o.frames * timed / window_s;
  m.flops_per_s = transformer_training_flops(transformer_sizes(size), o.batch, tokens, o.frames, o.n_mels) * timed /
                  window_s;
  if (gpu_timed) m.gpu_busy = gpu_s / window_s;
  return m;
}

void print_throughput(const Measurement& m, int timed_steps) {
  std::printf("throughput over %d steps back to back: %.1f samples/s, %.0f mel frames/s (valid; %.0f padded)\n",
              timed_steps, m.samples_per_s, m.valid_frames_per_s, m.padded_frames_per_s);
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f%%", 100 * fraction);
  return text;
}

std::string fmt_peak(double peak, const std::string& gpu) {
  char text[128];
  std::snprintf(text, sizeof(text), "%.0f TFLOP/s (dense bf16 peak of the %s)", peak / 1e12, gpu.c_str());
  return text;
}

int run_table(const Options& o) {
  const int tokens = tokens_of(o);
  const auto shape = testing::make_batch(o.batch, tokens, o.frames, o.n_mels, 100, 1);
  int64_t valid_frames = 0;
  for (const int32_t length : shape.mel_lens) valid_frames += length;
  const int first_timed = o.steps > warmup_steps ? warmup_steps : 0;
  std::printf("# bench_train_step: device %s, bf16 autocast %s, batch %d x %d frames (%.0f%% valid) x %d mels, "
              "%d tokens, %d threads, world %d; steps %d..%d timed\n",
              describe_device(o).c_str(), o.bf16 ? "on" : "off", o.batch, o.frames,
              100.0 * static_cast<double>(valid_frames) / (static_cast<double>(o.batch) * o.frames), o.n_mels, tokens,
              o.threads, o.world, first_timed, o.steps - 1);
  // MFU: the model's matrix FLOPs (transformer_training_flops: padded shapes, forward x 3) per
  // second over the GPU's dense bf16 peak; GPU busy: CUDA-event time of the steps over wall time.
  const std::string name = gpu_name(o);
  const double peak = bf16_peak_flops(name);
  std::printf("# samples/s and mel frames/s over the timed steps back to back; valid = frames without padding; "
              "MFU = model TFLOP/s / %s\n",
              peak > 0 ? fmt_peak(peak, name).c_str() : "(no known bf16 peak for this device)");
  std::printf("#%5s %10s %10s %11s %14s %14s %10s %6s %9s\n", "size", "params", "median_ms", "samples/s", "valid_frm/s",
              "padded_frm/s", "TFLOP/s", "MFU", "GPU_busy");
  std::fflush(stdout);
  for (const std::string& size : o.table) {
    const Measurement m = measure(o, size, false);
    std::printf(" %5s %9.1fM %10.1f %11.1f %14.0f %14.0f %10.1f %6s %9s\n", m.size.c_str(),
                static_cast<double>(m.parameters) / 1e6, m.median_step_s * 1e3, m.samples_per_s, m.valid_frames_per_s,
                m.padded_frames_per_s, m.flops_per_s / 1e12, peak > 0 ? percent(m.flops_per_s / peak).c_str() : "-",
                m.gpu_busy >= 0 ? percent(m.gpu_busy).c_str() : "-");
    std::fflush(stdout);
  }
  return 0;
}

// What the CUDA events behind GPU busy cost (model/trainer.cpp), measured inside one process: two
// trainers of the same size on the same batch, one timing its steps with events and one made with
// SLUICE_GPU_STEP_TIMING=off, stepped alternately, so that both see the same GPU clocks and load
// (separate processes differed by up to +-7% in median step time on the H100).
int run_events_ab(const Options& o) {
  const int tokens = tokens_of(o);
  const ModelConfig model = model_of(o, o.size);
  const OptimizerConfig optimizer = optimizer_of();
  Trainer with_events(model, optimizer, 1);
  setenv("SLUICE_GPU_STEP_TIMING", "off", 1);
  Trainer without_events(model, optimizer, 1);
  unsetenv("SLUICE_GPU_STEP_TIMING");
  const auto data = testing::make_batch(o.batch, tokens, o.frames, o.n_mels, model.vocab_size, 1);
  std::vector<double> on, off;
  int timed_on = 0;
  for (int step = 0; step < o.steps; ++step) {
    for (Trainer* trainer : {&with_events, &without_events}) {
      const auto start = Clock::now();
      const StepResult r = trainer->train_step(data.view());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (step < warmup_steps) continue;
      (trainer == &with_events ? on : off).push_back(seconds);
      if (trainer == &with_events && r.gpu_s >= 0) ++timed_on;
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const auto mean = [](const std::vector<double>& v) {
    double total = 0;
    for (double x : v) total += x;
    return v.empty() ? 0.0 : total / static_cast<double>(v.size());
  };
  std::printf("# CUDA step events, A/B in one process: %s, %s, batch %d x %d frames, %zu steps each, alternating\n",
              o.size.c_str(), describe_device(o).c_str(), o.batch, o.frames, on.size());
  std::printf("events on (%d steps timed by events): median %.3f ms, mean %.3f ms\n", timed_on, 1e3 * median(on),
              1e3 * mean(on));
  std::printf("events off: median %.3f ms, mean %.3f ms\n", 1e3 * median(off), 1e3 * mean(off));
  std::printf("on / off: median %.4f, mean %.4f\n", median(on) / median(off), mean(on) / mean(off));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return usage();
  const std::string skip = skip_reason(o);
  if (!skip.empty()) {
    std::printf("bench_train_step: skipped (device %s): %s\n", o.device.c_str(), skip.c_str());
    return 0;
  }
  try {
    set_compute_threads(o.threads);
    if (o.events_ab) return run_events_ab(o);
    if (!o.table.empty()) return run_table(o);
    const Measurement m = measure(o, o.size, true);
    if (on_cuda(o)) print_throughput(m, o.steps > warmup_steps ? o.steps - warmup_steps : o.steps);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_train_step: %s\n", error.what());
    return 1;
  }
}
