#include "commands/bench_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/command_options.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "bench/measure/bench_sweep.h"
#include "bench/measure/cache_read_bench.h"
#include "bench/measure/mel_bench.h"
#include "bench/measure/transport_bench.h"
#include "model/device_facts.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

std::string self_binary() {
  char path[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "sluice";
}

}  // namespace

// Each subcommand's options, and the steps that add them to the command line and run them.
struct BenchCommand::Options {
  CLI::App* sweep = nullptr;
  benchmark::SweepOptions sweep_options;
  std::vector<std::string> sweep_specs;
  std::string sweep_cache, sweep_scratch;
  bool no_replay = false;

  CLI::App* max_batch = nullptr;
  ConfigOptions max_batch_config;
  model::MaxBatchRequest max_batch_request;

  CLI::App* transport = nullptr;
  benchmark::TransportBenchOptions transport_options;
  std::string min_bytes = "64K", max_bytes = "64M", transport_gpu = "auto";

  CLI::App* cache_bench = nullptr;
  benchmark::CacheReadOptions cache_options;

  CLI::App* mel = nullptr;
  benchmark::MelBenchOptions mel_options;

  void add_sweep(CLI::App* bench) {
    sweep = bench->add_subcommand(
        "sweep",
        "Train for --steps on the real cache at every combination of the --sweep values, --repeat times each, plus "
        "one train.replay_from_memory baseline per batch shape; print mel frames/s, input-pipeline efficiency, "
        "input wait and peak memory per point, and recommend settings only when the best point beats the others "
        "beyond the run-to-run spread. Run it without mpirun: it starts `mpirun -np N sluice train` itself.");
    sweep->add_option("--cache", sweep_cache, "cache directory made by `sluice prep`")->required();
    sweep->add_option("--np", sweep_options.ranks, "ranks per run (default 1: one process feeding itself; N >= 2 starts `mpirun --bind-to none --oversubscribe -np N`)")
        ->check(CLI::Range(1, 4096));
    sweep->add_option("--steps", sweep_options.steps,
                      "global steps per run (the first min(10, steps/5) are warm-up, not measured; default 40)")
        ->check(CLI::Range(5, 1 << 30));
    sweep->add_option("--repeat", sweep_options.repeat, "runs per point, to show the spread (default 3)")
        ->check(CLI::Range(1, 100));
    sweep->add_option("--sweep", sweep_specs,
                      "a setting and its values, e.g. --sweep train.batch_size=4,8,16 --sweep train.credits=1,3 "
                      "(repeatable; every combination runs)")
        ->type_name("KEY=V1,V2");
    attach_config_options(*sweep, sweep_options.config_file, sweep_options.overrides);
    sweep->add_option("--mpirun", sweep_options.mpirun, "the mpirun to start runs with (default mpirun)");
    sweep->add_option("--scratch", sweep_scratch,
                      "directory for the runs (default /tmp/sluice-bench-sweep-PID; removed after a clean sweep)");
    sweep->add_flag("--keep", sweep_options.keep_runs, "keep the run directories and logs");
    sweep->add_flag("--no-replay", no_replay, "skip the replay baseline (no efficiency column)");
  }

  void add_max_batch(CLI::App* bench) {
    max_batch = bench->add_subcommand(
        "max-batch",
        "Find the largest batch of the longest padded shape for which one training step fits the CUDA device "
        "(doubling, then binary search with out-of-memory caught), report the caching allocator's peak allocated "
        "memory, and recommend it minus a safety margin. Needs a CUDA device; on a CPU-only machine it says so "
        "and exits 1.");
    max_batch_config.attach(*max_batch);
    max_batch->add_option("--frames", max_batch_request.frames, "padded mel frames per sample (default 800)")
        ->check(CLI::Range(1, 1 << 20));
    max_batch->add_option("--tokens", max_batch_request.tokens, "padded tokens per sample (default 160)")
        ->check(CLI::Range(1, 1 << 20));
    max_batch->add_option("--max", max_batch_request.max_batch, "largest batch to try (default 1024)")
        ->check(CLI::Range(1, 1 << 20));
    max_batch->add_option("--margin", max_batch_request.margin,
                          "fraction taken off the largest fitting batch (default 0.1)")
        ->check(CLI::Range(0.0, 0.9));
  }

  void add_transport(CLI::App* bench) {
    transport = bench->add_subcommand(
        "transport",
        "Feed transport bandwidth by message size (size, count, time per batch, GB/s, ratio to a host memcpy "
        "measured in the same run), like nccl-tests' sendrecv: inproc alone; inproc and mpi under `mpirun -np 2`. "
        "With CUDA and a GPU, a second table: nccl against NCCL send-to-self, and cuda_ipc (2 ranks) against a "
        "device-to-device copy.");
    transport->add_option("--min-bytes", min_bytes, "smallest message (default 64K; K, M, G suffixes)");
    transport->add_option("--max-bytes", max_bytes, "largest message (default 64M)");
    transport->add_option("--slots", transport_options.slots, "credits / messages in flight (default 3)")
        ->check(CLI::Range(1, 64));
    transport->add_option("--rounds", transport_options.rounds, "interleaved rounds; each column is the best (default 3)")
        ->check(CLI::Range(1, 100));
    transport->add_option("--gpu", transport_gpu,
                          "GPU table (d2d copy, NCCL send-to-self, nccl, cuda_ipc): auto = when every rank sees a "
                          "CUDA device, else one line says why not (default); on = a missing GPU is an error; off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
  }

  void add_cache(CLI::App* bench) {
    cache_bench = bench->add_subcommand(
        "cache",
        "Cache read patterns: open time, sequential batches in cache order, random batches, against plain "
        "sequential read() of the same shard files (page cache) measured in the same run. With --cache on a real "
        "cache; without, on a synthetic LJSpeech-shaped cache built in a temporary directory.");
    cache_bench->add_option("--cache", cache_options.dir, "an existing cache (default: build a synthetic one)");
    cache_bench->add_option("--samples", cache_options.samples, "synthetic cache: samples (default 13100)");
    cache_bench->add_option("--batch", cache_options.batch, "samples per batch (default 32)")->check(CLI::Range(1, 1 << 20));
    cache_bench->add_option("--batches", cache_options.batches, "random batches to read (default 300)")
        ->check(CLI::Range(1, 1 << 24));
  }

  void add_mel(CLI::App* bench) {
    mel = bench->add_subcommand(
        "mel",
        "Mel extraction rate on one thread (decode + resample + log-mel, and mel alone), in audio-seconds per "
        "second, against torchaudio on the same files in the same run when /usr/bin/python3 has it.");
    mel->add_option("--clips", mel_options.clips, "synthetic clips of 2-10 s when no files are given (default 100)")
        ->check(CLI::Range(1, 1 << 20));
    mel->add_option("--rate", mel_options.rate, "sample rate of the synthetic clips (default 22050)")
        ->check(CLI::Range(1000, 384000));
    mel->add_option("--repeat", mel_options.repeat, "passes over the files (default 3)")->check(CLI::Range(1, 1000));
    mel->add_flag("--no-baseline", [this](int64_t) { mel_options.run_baseline = false; }, "skip torchaudio");
    mel->add_option("FILES", mel_options.inputs, "audio files or folders (default: synthetic clips)");
  }

  int run_sweep() {
    sweep_options.sluice = self_binary();
    sweep_options.cache = sweep_cache;
    sweep_options.replay_baseline = !no_replay;
    sweep_options.scratch = sweep_scratch.empty() ? fs::temp_directory_path() /
                                                             ("sluice-bench-sweep-" + std::to_string(::getpid()))
                                                       : fs::path(sweep_scratch);
    for (const auto& spec : sweep_specs) sweep_options.axes.push_back(benchmark::parse_sweep(spec));
    // Fails early, naming the file and key, before any run starts.
    auto settings = ConfigOptions{sweep_options.config_file, sweep_options.overrides}.load();
    for (const auto& axis : sweep_options.axes) {
      for (const auto& value : axis.values) settings.set(axis.key, value, "--sweep");
  }
  return benchmark::run_sweep(sweep_options);
  }

  int run_max_batch() {
    const auto settings = max_batch_config.load();
    model::MaxBatchRequest& request = max_batch_request;
    request.model.kind = settings.string("model.kind");
    request.model.size = settings.string("model.size");
    request.model.torchscript_path = settings.string("model.torchscript_path");
    request.model.dropout = settings.number("model.dropout");
    request.model.device = "cuda:0";  // the GPU is what is measured, whatever model.device says
    request.model.bf16_autocast = settings.boolean("model.bf16");
    try {
      const model::MaxBatchResult result = model::find_max_batch(request);
      std::printf("device %s, %.1f GiB; samples of %d frames x %d tokens, model %s\n", result.device_name.c_str(),
                  static_cast<double>(result.device_total_bytes) / (1 << 30), request.frames, request.tokens,
                  request.model.size.c_str());
      std::printf("%8s %6s %18s %18s\n", "batch", "fits", "peak allocated", "peak reserved");
      for (const auto& probe : result.probes) {
        std::printf("%8d %6s %15.2f GiB %15.2f GiB\n", probe.batch, probe.fits ? "yes" : "OOM",
                    static_cast<double>(probe.peak_allocated_bytes) / (1 << 30),
                    static_cast<double>(probe.peak_reserved_bytes) / (1 << 30));
      }
      std::printf("largest batch that fits: %d (peak allocated %.2f GiB); with a %.0f%% margin:\n"
                  "train:\n  batch_size: %d\n",
                  result.largest_fitting, static_cast<double>(result.peak_allocated_bytes) / (1 << 30),
                  100.0 * request.margin, result.recommended);
      return result.largest_fitting > 0 ? 0 : 1;
    } catch (const ConfigError& error) {
      // Not a usage error: the machine lacks what the command measures.
      log::get("launcher")->error("{}", error.what());
      return 1;
  }
  }

  int run_transport(MpiSession& session) {
    transport_options.min_bytes = benchmark::parse_bytes(min_bytes);
    transport_options.max_bytes = benchmark::parse_bytes(max_bytes);
    transport_options.gpu = *benchmark::parse_gpu_columns(transport_gpu);
    return benchmark::run_transport_bench(session, transport_options);
  }
};

BenchCommand::BenchCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  auto* bench = app.add_subcommand("bench", bench_summary);
  bench->require_subcommand(1);
  options_->add_sweep(bench);
  options_->add_max_batch(bench);
  options_->add_transport(bench);
  options_->add_cache(bench);
  options_->add_mel(bench);
}

BenchCommand::~BenchCommand() = default;

std::optional<int> BenchCommand::run_without_mpi() {
  Options& o = *options_;
  if (*o.sweep) return o.run_sweep();
  if (*o.max_batch) return o.run_max_batch();
  if (*o.cache_bench) return benchmark::run_cache_read_bench(o.cache_options);
  if (*o.mel) return benchmark::run_mel_bench(o.mel_options);
  return std::nullopt;
}

std::optional<int> BenchCommand::run_with_mpi(MpiSession& session) {
  if (*options_->transport) return options_->run_transport(session);
  return std::nullopt;
}

}  // namespace sluice
