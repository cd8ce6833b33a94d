#include "commands/tuning_commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "measure/bench_sweep.h"
#include "measure/cache_read_bench.h"
#include "measure/mel_bench.h"
#include "measure/transport_bench.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "model/device_facts.h"
#include "commands/doctor.h"
#include "runtime/settings.h"

namespace sluice {

namespace fs = std::filesystem;

struct TuningCommands::Options {
  CLI::App* doctor = nullptr;
  std::string config_file;
  std::vector<std::string> overrides;
  std::string cache;
  runtime::DoctorOptions doctor_options;
  double read_mb = 1024;

  CLI::App* sweep = nullptr;
  benchmark::SweepOptions sweep_options;
  std::vector<std::string> sweep_specs;
  std::string sweep_cache, sweep_scratch;
  bool no_replay = false;

  CLI::App* max_batch = nullptr;
  std::vector<std::string> max_batch_overrides;
  std::string max_batch_config;
  model::MaxBatchRequest max_batch_request;

  CLI::App* transport = nullptr;
  benchmark::TransportBenchOptions transport_options;
  std::string min_bytes = "64K", max_bytes = "64M", transport_gpu = "auto";

  CLI::App* cache_bench = nullptr;
  benchmark::CacheReadOptions cache_options;

  CLI::App* mel = nullptr;
  benchmark::MelBenchOptions mel_options;

  config::Config load(const std::string& file, const std::vector<std::string>& sets) const {
    return config::Config::load(runtime::settings_schema(), file, sets);
  }
};

namespace {

void attach_config(CLI::App& command, std::string& file, std::vector<std::string>& overrides) {
  command.add_option("-c,--config", file, "YAML config file, as for `sluice train`")->check(CLI::ExistingFile);
  command.add_option("--set", overrides, "override one setting, e.g. --set train.batch_size=16 (repeatable)")
      ->type_name("KEY=VALUE");
}

std::string self_binary() {
  char path[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "sluice";
}

}  // namespace

TuningCommands::TuningCommands(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;

  o.doctor = app.add_subcommand(
      "doctor",
      "Check this machine, MPI launch, config and cache for `sluice train`: GPUs (name, memory, driver, CUDA, "
      "NCCL), MPI library and launcher, HDF5 and libtorch versions, the cache's sequential read speed, the config "
      "and role plan with train's own errors, and every problem found with its fix. Under `mpirun -np N` it "
      "plans for that launch; alone, for --ranks.");
  attach_config(*o.doctor, o.config_file, o.overrides);
  o.doctor->add_option("--cache", o.cache, "cache directory to check (sets cache.dir)");
  o.doctor->add_option("--ranks", o.doctor_options.ranks,
                       "plan the roles for this many ranks (default: this launch's ranks; 1 alone)")
      ->check(CLI::Range(1, 1 << 20));
  o.doctor->add_option("--nodes", o.doctor_options.nodes, "spread --ranks over this many nodes (default 1)")
      ->check(CLI::Range(1, 1 << 16));
  o.doctor->add_option("--gpus-per-node", o.doctor_options.gpus_per_node,
                       "plan with this many GPUs per node instead of those visible here (with model.device=cuda)")
      ->check(CLI::Range(0, 1024));
  o.doctor->add_flag("--verify", o.doctor_options.verify,
                     "also read every chunk of the cache and check its checksums (as `sluice cache verify`)");
  o.doctor->add_option("--read-mb", o.read_mb, "read at most this many MB of shards for the read speed (default 1024)")
      ->check(CLI::Range(1.0, 1e9));
  o.doctor->add_flag("--json", o.doctor_options.json, "print JSON instead of the table");
  o.doctor->footer("Exit codes: 0 nothing blocking (warnings and notes may be listed); 1 a blocking problem "
                   "(train would fail or could not start); 2 bad option.");

  auto* bench = app.add_subcommand("bench", "Measure: end-to-end sweeps of the training settings, the largest batch "
                                            "that fits the GPU, and micro-benchmarks of the transport, the cache and "
                                            "the mel extraction");
  bench->require_subcommand(1);

  o.sweep = bench->add_subcommand(
      "sweep",
      "Train for --steps on the real cache at every combination of the --sweep values, --repeat times each, plus "
      "one train.replay_from_memory baseline per batch shape; print mel frames/s, input-pipeline efficiency, "
      "input wait and peak memory per point, and recommend settings only when the best point beats the others "
      "beyond the run-to-run spread. Run it without mpirun: it starts `mpirun -np N sluice train` itself.");
  o.sweep->add_option("--cache", o.sweep_cache, "cache directory made by `sluice prep`")->required();
  o.sweep->add_option("--np", o.sweep_options.ranks, "ranks per run (default 1: one process feeding itself; N >= 2 starts `mpirun --bind-to none --oversubscribe -np N`)")
      ->check(CLI::Range(1, 4096));
  o.sweep->add_option("--steps", o.sweep_options.steps,
                      "global steps per run (the first min(10, steps/5) are warm-up, not measured; default 40)")
      ->check(CLI::Range(5, 1 << 30));
  o.sweep->add_option("--repeat", o.sweep_options.repeat, "runs per point, to show the spread (default 3)")
      ->check(CLI::Range(1, 100));
  o.sweep->add_option("--sweep", o.sweep_specs,
                      "a setting and its values, e.g. --sweep train.batch_size=4,8,16 --sweep train.credits=1,3 "
                      "(repeatable; every combination runs)")
      ->type_name("KEY=V1,V2");
  attach_config(*o.sweep, o.sweep_options.config_file, o.sweep_options.overrides);
  o.sweep->add_option("--mpirun", o.sweep_options.mpirun, "the mpirun to start runs with (default mpirun)");
  o.sweep->add_option("--scratch", o.sweep_scratch,
                      "directory for the runs (default /tmp/sluice-bench-sweep-PID; removed after a clean sweep)");
  o.sweep->add_flag("--keep", o.sweep_options.keep_runs, "keep the run directories and logs");
  o.sweep->add_flag("--no-replay", o.no_replay, "skip the replay baseline (no efficiency column)");

  o.max_batch = bench->add_subcommand(
      "max-batch",
      "Find the largest batch of the longest padded shape for which one training step fits the CUDA device "
      "(doubling, then binary search with out-of-memory caught), report the caching allocator's peak allocated "
      "memory, and recommend it minus a safety margin. Needs a CUDA device; on a CPU-only machine it says so "
      "and exits 1.");
  attach_config(*o.max_batch, o.max_batch_config, o.max_batch_overrides);
  o.max_batch->add_option("--frames", o.max_batch_request.frames, "padded mel frames per sample (default 800)")
      ->check(CLI::Range(1, 1 << 20));
  o.max_batch->add_option("--tokens", o.max_batch_request.tokens, "padded tokens per sample (default 160)")
      ->check(CLI::Range(1, 1 << 20));
  o.max_batch->add_option("--max", o.max_batch_request.max_batch, "largest batch to try (default 1024)")
      ->check(CLI::Range(1, 1 << 20));
  o.max_batch->add_option("--margin", o.max_batch_request.margin,
                          "fraction taken off the largest fitting batch (default 0.1)")
      ->check(CLI::Range(0.0, 0.9));

  o.transport = bench->add_subcommand(
      "transport",
      "Feed transport bandwidth by message size (size, count, time per batch, GB/s, ratio to a host memcpy "
      "measured in the same run), like nccl-tests' sendrecv: inproc alone; inproc and mpi under `mpirun -np 2`. "
      "With CUDA and a GPU, a second table: nccl against NCCL send-to-self, and cuda_ipc (2 ranks) against a "
      "device-to-device copy.");
  o.transport->add_option("--min-bytes", o.min_bytes, "smallest message (default 64K; K, M, G suffixes)");
  o.transport->add_option("--max-bytes", o.max_bytes, "largest message (default 64M)");
  o.transport->add_option("--slots", o.transport_options.slots, "credits / messages in flight (default 3)")
      ->check(CLI::Range(1, 64));
  o.transport->add_option("--rounds", o.transport_options.rounds, "interleaved rounds; each column is the best (default 3)")
      ->check(CLI::Range(1, 100));
  o.transport->add_option("--gpu", o.transport_gpu,
                          "GPU table (d2d copy, NCCL send-to-self, nccl, cuda_ipc): auto = when every rank sees a "
                          "CUDA device, else one line says why not (default); on = a missing GPU is an error; off")
      ->check(CLI::IsMember({"auto", "on", "off"}));

  o.cache_bench = bench->add_subcommand(
      "cache",
      "Cache read patterns: open time, sequential batches in cache order, random batches, against plain "
      "sequential read() of the same shard files (page cache) measured in the same run. With --cache on a real "
      "cache; without, on a synthetic LJSpeech-shaped cache built in a temporary directory.");
  o.cache_bench->add_option("--cache", o.cache_options.dir, "an existing cache (default: build a synthetic one)");
  o.cache_bench->add_option("--samples", o.cache_options.samples, "synthetic cache: samples (default 13100)");
  o.cache_bench->add_option("--batch", o.cache_options.batch, "samples per batch (default 32)")->check(CLI::Range(1, 1 << 20));
  o.cache_bench->add_option("--batches", o.cache_options.batches, "random batches to read (default 300)")
      ->check(CLI::Range(1, 1 << 24));

  o.mel = bench->add_subcommand(
      "mel",
      "Mel extraction rate on one thread (decode + resample + log-mel, and mel alone), in audio-seconds per "
      "second, against torchaudio on the same files in the same run when /usr/bin/python3 has it.");
  o.mel->add_option("--clips", o.mel_options.clips, "synthetic clips of 2-10 s when no files are given (default 100)")
      ->check(CLI::Range(1, 1 << 20));
  o.mel->add_option("--rate", o.mel_options.rate, "sample rate of the synthetic clips (default 22050)")
      ->check(CLI::Range(1000, 384000));
  o.mel->add_option("--repeat", o.mel_options.repeat, "passes over the files (default 3)")->check(CLI::Range(1, 1000));
  o.mel->add_flag("--no-baseline", [&o](int64_t) { o.mel_options.run_baseline = false; }, "skip torchaudio");
  o.mel->add_option("FILES", o.mel_options.inputs, "audio files or folders (default: synthetic clips)");
}

TuningCommands::~TuningCommands() = default;

std::optional<int> TuningCommands::run_without_mpi() {
  Options& o = *options_;
  if (*o.sweep) {
    o.sweep_options.sluice = self_binary();
    o.sweep_options.cache = o.sweep_cache;
    o.sweep_options.replay_baseline = !o.no_replay;
    o.sweep_options.scratch = o.sweep_scratch.empty() ? fs::temp_directory_path() /
                                                             ("sluice-bench-sweep-" + std::to_string(::getpid()))
                                                       : fs::path(o.sweep_scratch);
    for (const auto& spec : o.sweep_specs) o.sweep_options.axes.push_back(benchmark::parse_sweep(spec));
    // Fails early, naming the file and key, before any run starts.
    auto settings = o.load(o.sweep_options.config_file, o.sweep_options.overrides);
    for (const auto& axis : o.sweep_options.axes) {
      for (const auto& value : axis.values) settings.set(axis.key, value, "--sweep");
    }
    return benchmark::run_sweep(o.sweep_options);
  }
  if (*o.max_batch) {
    const auto settings = o.load(o.max_batch_config, o.max_batch_overrides);
    model::MaxBatchRequest& request = o.max_batch_request;
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
  if (*o.cache_bench) return benchmark::run_cache_read_bench(o.cache_options);
  if (*o.mel) return benchmark::run_mel_bench(o.mel_options);
  return std::nullopt;
}

std::optional<int> TuningCommands::run_with_mpi(MpiSession& session) {
  Options& o = *options_;
  if (*o.doctor) {
    o.doctor_options.read_bytes = static_cast<int64_t>(o.read_mb * 1e6);
    std::string config_error;
    std::optional<config::Config> settings;
    try {
      settings = o.load(o.config_file, o.overrides);
      if (!o.cache.empty()) settings->set("cache.dir", o.cache, "--cache");
    } catch (const ConfigError& error) {
      config_error = error.what();
      settings.reset();
    }
    return runtime::run_doctor(session, settings ? &*settings : nullptr, config_error, o.doctor_options);
  }
  if (*o.transport) {
    o.transport_options.min_bytes = benchmark::parse_bytes(o.min_bytes);
    o.transport_options.max_bytes = benchmark::parse_bytes(o.max_bytes);
    o.transport_options.gpu = *benchmark::parse_gpu_columns(o.transport_gpu);
    return benchmark::run_transport_bench(session, o.transport_options);
  }
  return std::nullopt;
}

}  // namespace sluice
