#include "commands/doctor.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "cache/cache_reader.h"
#include "cache/cache_verifier.h"
#include "cache/manifest.h"
#include "common/error.h"
#include "common/host.h"
#include "model/model_config.h"
#include "runtime/train/batch_feeder.h"
#include "runtime/train/cache_agreement.h"
#include "runtime/train/batch_plan.h"
#include "runtime/settings.h"
#include "runtime/train/train_settings.h"

namespace sluice::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(Severity severity) {
  switch (severity) {
    case Severity::blocking: return "blocking";
    case Severity::warning: return "warning";
    case Severity::note: return "note";
  }
  return "?";
}

std::string launcher_from_env(const std::function<const char*(const char*)>& lookup) {
  auto set = [&](const char* name) {
    const char* value = lookup(name);
    return value != nullptr && *value != '\0';
  };
  if (set("OMPI_COMM_WORLD_SIZE")) return "mpirun (Open MPI)";
  if (set("SLURM_STEP_ID") && (set("PMIX_RANK") || set("PMI_RANK") || set("SLURM_PROCID"))) return "srun";
  if (set("PMI_RANK") || set("HYDRA_CONTROL_FD")) return "mpiexec (Hydra)";
  // PMIX_RANK alone is no launcher: an Open MPI singleton sets it in its own environment.
  return "singleton";
}

Problem problem_from_config_error(const std::string& message) {
  static const char* verbs[] = {"use ", "set ", "start ", "lower ", "give ", "launch ", "run ", "rerun ",
                                "pass ", "raise ", "add ", "resume "};
  for (size_t colon = message.rfind(": "); colon != std::string::npos && colon > 0;
       colon = message.rfind(": ", colon - 1)) {
    const std::string tail = message.substr(colon + 2);
    for (const char* verb : verbs) {
      if (tail.rfind(verb, 0) == 0) return {Severity::blocking, "config", message.substr(0, colon), tail};
    }
  }
  return {Severity::blocking, "config", message,
          "change the setting named in the message (the same error stops `sluice train`)"};
}

int planned_threads_on_first_node(const RolePlan& roles, int reader_threads) {
  // Model ranks size their compute pool to share the cores (run_train), so each counts as one
  // thread that needs a core; the data side's readers and sender come on top.
  int threads = 0;
  for (const auto& rank : roles.ranks) {
    if (rank.node != 0) continue;
    if (rank.role == Role::model) threads += 1;
    if (rank.role == Role::data) threads += reader_threads + 1;
    if (rank.role == Role::data_and_model) threads += 1 + reader_threads + 1;
  }
  return threads;
}

namespace {

// GPUs: the one the model asks for, the CUDA libtorch it needs, the transport's build.
void diagnose_gpus(const DoctorFacts& facts, std::vector<Problem>& problems) {
  const bool wants_gpu = facts.model_device == "cuda";
  const bool gpu_visible = !facts.gpus.gpus.empty() && facts.torch.cuda_devices > 0;
  if (wants_gpu && facts.gpus.gpus.empty()) {
    problems.push_back({Severity::blocking, "gpu",
                        "model.device is cuda but no GPU is visible" +
                            (facts.gpus.problem.empty() ? std::string() : " (" + facts.gpus.problem + ")"),
                        "run on a GPU node (check CUDA_VISIBLE_DEVICES and the driver with nvidia-smi), or set "
                        "model.device: cpu"});
  } else if (wants_gpu && facts.torch.cuda_devices == 0) {
    problems.push_back({Severity::blocking, "gpu",
                        "the CUDA runtime sees " + std::to_string(facts.gpus.gpus.size()) +
                            " GPU(s) but libtorch " + facts.torch.version + " sees none" +
                            (facts.torch.cuda_build ? "" : " (a CPU-only libtorch)"),
                        "build sluice against a CUDA libtorch (CMAKE_PREFIX_PATH=$(python -c 'import torch; "
                        "print(torch.utils.cmake_prefix_path)'))"});
  } else if (!wants_gpu && gpu_visible) {
    problems.push_back({Severity::note, "gpu",
                        std::to_string(facts.gpus.gpus.size()) + " GPU(s) visible but model.device is cpu",
                        "set model.device: cuda to train on them"});
  }
  if ((facts.transport_requested == "nccl" && !facts.gpus.nccl_compiled) ||
      (facts.transport_requested == "cuda_ipc" && !facts.gpus.cuda_compiled)) {
    problems.push_back({Severity::blocking, "gpu",
                        "roles.transport is " + facts.transport_requested + " but this build has no " +
                            (facts.transport_requested == "nccl" ? "NCCL" : "CUDA"),
                        "rebuild with the CUDA toolkit and NCCL installed (cmake -DSLUICE_CUDA=ON), or use "
                        "roles.transport: mpi"});
  }
}

// The config and the role plan, with train's own errors.
void diagnose_config(const DoctorFacts& facts, std::vector<Problem>& problems) {
  if (!facts.config_error.empty()) problems.push_back(problem_from_config_error(facts.config_error));
  if (facts.roles && facts.roles->transport != "inproc" && facts.roles->transport != "mpi") {
    problems.push_back({Severity::blocking, "config",
                        "the plan's transport is " + facts.roles->transport +
                            ", which `sluice train` in this build does not run yet",
                        "use roles.transport: mpi (CPU) for now"});
  }
}

// The MPI launch against the plan.
void diagnose_launch(const DoctorFacts& facts, std::vector<Problem>& problems) {
  if (facts.launch.launcher == "singleton" && facts.planned_ranks > 1) {
    problems.push_back({Severity::note, "mpi",
                        "doctor runs as one process; the plan above is for " + std::to_string(facts.planned_ranks) +
                            " ranks",
                        "start train with `mpirun --bind-to none -np " + std::to_string(facts.planned_ranks) +
                            " sluice train ...` (or srun)"});
  }
}

// CPU: threads against cores, and the binding.
void diagnose_cpu(const DoctorFacts& facts, std::vector<Problem>& problems) {
  if (facts.roles) {
    const int threads = planned_threads_on_first_node(*facts.roles, facts.reader_threads);
    if (threads > facts.usable_cores) {
      problems.push_back({Severity::warning, "cpu",
                          "the plan needs at least " + std::to_string(threads) + " threads on " +
                              std::to_string(facts.usable_cores) +
                              " core(s) of the first node (one compute thread per model rank, the readers and "
                              "sender of each data rank): the feed takes cycles from the model ranks",
                          "lower train.reader_threads (now " + std::to_string(facts.reader_threads) +
                              "), start fewer ranks per node, or run on a node with more cores"});
    }
  }
  if (!facts.binding_warning.empty()) {
    const std::string& w = facts.binding_warning;
    const size_t split = w.find("; launch");
    problems.push_back({Severity::warning, "cpu", w.substr(0, split),
                        split == std::string::npos ? "launch with mpirun --bind-to none" : w.substr(split + 2)});
  }
}

// The cache (its directory comes from the config: unknown when the config did not load).
void diagnose_cache(const DoctorFacts& facts, std::vector<Problem>& problems) {
  const CacheFacts& cache = facts.cache;
  if (!facts.config_loaded) {
    problems.push_back({Severity::note, "cache", "the cache was not checked: the config did not load",
                        "fix the config error above and run doctor again"});
  } else if (cache.dir.empty()) {
    problems.push_back({Severity::blocking, "cache", "no cache directory given (cache.dir is empty)",
                        "pass --cache DIR (a directory made by `sluice prep`)"});
  } else if (!cache.exists) {
    problems.push_back({Severity::blocking, "cache", "cache directory " + cache.dir + " does not exist",
                        "prepare it: sluice prep --corpus CORPUS -o " + cache.dir});
  } else if (!cache.complete) {
    problems.push_back({Severity::blocking, "cache", cache.dir + " has no manifest.json: the cache is unfinished",
                        "rerun the same `sluice prep` to finish it (finished shards are kept)"});
  } else if (!cache.open_error.empty()) {
    const bool mixture = cache.open_error.rfind("train.mixture", 0) == 0;  // caches that disagree, not damage
    problems.push_back({Severity::blocking, "cache", "the cache does not open: " + cache.open_error,
                        mixture ? "prepare the caches of train.mixture with the same features (the message says which)"
                                : "run `sluice cache verify " + cache.dir + "`, then re-prepare it with --overwrite"});
  } else if (cache.verified && !cache.verify_faults.empty()) {
    problems.push_back({Severity::blocking, "cache",
                        std::to_string(cache.verify_faults.size()) + " fault(s) in the cache, first: " +
                            cache.verify_faults.front(),
                        "re-prepare the faulty shards: delete them and rerun the same `sluice prep`"});
  } else if (!cache.verified) {
    problems.push_back({Severity::note, "cache", "the cache's checksums were not read in this run",
                        "sluice doctor --verify (or sluice cache verify " + cache.dir + ") reads every chunk"});
  }
  if (cache.read && cache.read->resident_before >= 0.5) {
    char text[160];
    std::snprintf(text, sizeof(text), "%.0f%% of the bytes read were already in the page cache: %.0f MB/s is "
                  "memory speed, not the disk's", 100.0 * cache.read->resident_before, cache.read->mb_per_s);
    problems.push_back({Severity::note, "cache", text,
                        "for the disk's speed drop the page cache first (as root: sync; echo 3 > "
                        "/proc/sys/vm/drop_caches) or measure on a cold node"});
  }
}

}  // namespace

std::vector<Problem> diagnose(const DoctorFacts& facts) {
  std::vector<Problem> problems;
  diagnose_gpus(facts, problems);
  diagnose_config(facts, problems);
  diagnose_launch(facts, problems);
  diagnose_cpu(facts, problems);
  diagnose_cache(facts, problems);
  std::stable_sort(problems.begin(), problems.end(),
                   [](const Problem& a, const Problem& b) { return a.severity < b.severity; });
  return problems;
}

bool has_blocking(const std::vector<Problem>& problems) {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Problem& p) { return p.severity == Severity::blocking; });
}

json to_json(const DoctorFacts& facts, const std::vector<Problem>& problems) {
  json gpus = json::array();
  for (const auto& gpu : facts.gpus.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"memory_bytes", gpu.memory_bytes},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"compute_capability", std::to_string(gpu.compute_major) + "." + std::to_string(gpu.compute_minor)}});
  }
  json out;
  out["gpu"] = {{"devices", gpus},
                {"visible", gpus.empty() ? "none visible" : std::to_string(gpus.size())},
                {"driver_release", facts.gpus.driver_release},
                {"driver_cuda_version", facts.gpus.driver_version},
                {"cuda_runtime_version", facts.gpus.runtime_version},
                {"nccl_version", facts.gpus.nccl_version},
                {"cuda_compiled", facts.gpus.cuda_compiled},
                {"nccl_compiled", facts.gpus.nccl_compiled},
                {"why_none", facts.gpus.problem}};
  out["mpi"] = {{"library", facts.launch.mpi_library},
                {"launcher", facts.launch.launcher},
                {"world_size", facts.launch.world_size},
                {"in_slurm_job", facts.launch.in_slurm_job}};
  out["allocator"] = facts.launch.allocator;
  out["hdf5"] = {{"version", facts.hdf5_version}};
  out["torch"] = {{"version", facts.torch.version},
                  {"cuda_build", facts.torch.cuda_build},
                  {"cuda_devices", facts.torch.cuda_devices},
                  {"device", facts.torch.default_device}};
  out["cpu"] = {{"machine_cores", facts.machine_cores}, {"usable_cores", facts.usable_cores}};
  json config = {{"valid", facts.config_error.empty()},
                 {"error", facts.config_error},
                 {"model_device", facts.model_device},
                 {"transport_requested", facts.transport_requested},
                 {"planned_ranks", facts.planned_ranks},
                 {"gpus_per_node", facts.gpus_per_node}};
  if (facts.roles) {
    json ranks = json::array();
    for (const auto& rank : facts.roles->ranks) {
      ranks.push_back({{"rank", rank.rank}, {"host", rank.host}, {"gpu", rank.gpu}, {"role", to_string(rank.role)},
                       {"feeds", rank.feeds}, {"fed_by", rank.fed_by}});
    }
    config["transport"] = facts.roles->transport;
    config["roles"] = ranks;
  }
  out["config"] = config;
  const CacheFacts& cache = facts.cache;
  json cache_json = {{"dir", cache.dir},         {"mixture", cache.mixture}, {"exists", cache.exists},
                     {"complete", cache.complete},
                     {"open_error", cache.open_error}, {"samples", cache.samples}, {"shards", cache.shards},
                     {"n_mels", cache.n_mels},   {"verified", cache.verified}, {"verify_faults", cache.verify_faults}};
  if (cache.read) {
    cache_json["sequential_read"] = {{"dir", cache.read_dir},
                                     {"files", cache.read->files},
                                     {"bytes", cache.read->bytes},
                                     {"seconds", cache.read->seconds},
                                     {"mb_per_s", cache.read->mb_per_s},
                                     {"resident_before", cache.read->resident_before}};
  }
  out["cache"] = cache_json;
  json list = json::array();
  for (const auto& p : problems) {
    list.push_back({{"severity", to_string(p.severity)}, {"area", p.area}, {"what", p.what}, {"fix", p.fix}});
  }
  out["problems"] = list;
  out["blocking"] = has_blocking(problems);
  return out;
}

namespace {

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

std::string or_dash(const std::string& text) { return text.empty() ? "-" : text; }

}  // namespace

std::string to_table(const DoctorFacts& facts, const std::vector<Problem>& problems) {
  std::ostringstream out;
  auto row = [&](const std::string& key, const std::string& value) {
    char line[64];
    std::snprintf(line, sizeof(line), "  %-18s ", key.c_str());
    out << line << value << "\n";
  };
  out << "sluice doctor\n";
  if (facts.gpus.gpus.empty()) {
    row("GPUs", "none visible" + (facts.gpus.problem.empty() ? std::string() : " (" + facts.gpus.problem + ")"));
  }
  for (const auto& gpu : facts.gpus.gpus) {
    row("GPU " + std::to_string(gpu.index), gpu.name + ", " + gib(gpu.memory_bytes) + ", sm_" +
                                                std::to_string(gpu.compute_major) + std::to_string(gpu.compute_minor) +
                                                (gpu.pci_bus_id.empty() ? "" : ", " + gpu.pci_bus_id));
  }
  row("NVIDIA driver", facts.gpus.driver_release.empty() ? "-" : facts.gpus.driver_release + " (supports CUDA " +
                                                                    or_dash(facts.gpus.driver_version) + ")");
  row("CUDA runtime", facts.gpus.cuda_compiled ? or_dash(facts.gpus.runtime_version) : "not compiled in");
  row("NCCL", facts.gpus.nccl_compiled ? or_dash(facts.gpus.nccl_version) : "not compiled in");
  row("libtorch", facts.torch.version + (facts.torch.cuda_build ? " (CUDA)" : " (CPU only)") + ", device " +
                      facts.torch.default_device);
  row("HDF5", facts.hdf5_version);
  row("MPI", facts.launch.mpi_library);
  row("launcher", facts.launch.launcher + ", " + std::to_string(facts.launch.world_size) + " rank(s)" +
                      (facts.launch.in_slurm_job ? ", inside a Slurm job" : ""));
  row("allocator", facts.launch.allocator);
  row("CPU cores", std::to_string(facts.usable_cores) + " usable of " + std::to_string(facts.machine_cores));
  row("config", facts.config_error.empty() ? "valid" : "INVALID");
  if (facts.roles) {
    row("transport", facts.roles->transport + " (roles.transport: " + facts.transport_requested + ")");
    out << "  role plan for " << facts.planned_ranks << " rank(s):\n";
    std::istringstream plan(facts.roles->table());
    for (std::string line; std::getline(plan, line);) out << "    " << line << "\n";
  }
  const CacheFacts& cache = facts.cache;
  if (cache.complete && cache.open_error.empty()) {
    const std::string what =
        cache.mixture.empty() ? cache.dir : "train.mixture of " + std::to_string(cache.mixture.size()) + " caches";
    row("cache", what + ": " + std::to_string(cache.samples) + " samples in " + std::to_string(cache.shards) +
                     " shards, " + std::to_string(cache.n_mels) + " mels" +
                     (cache.verified ? (cache.verify_faults.empty() ? ", verified" : ", FAULTS") : ", not verified"));
  } else {
    row("cache", or_dash(cache.dir) + (cache.exists ? (cache.complete ? ": does not open" : ": unfinished") : ": missing"));
  }
  if (cache.read) {
    char text[160];
    std::snprintf(text, sizeof(text), "%.0f MB/s sequential over %d shard file(s), %.1f MB; %.0f%% in the page cache before",
                  cache.read->mb_per_s, cache.read->files, static_cast<double>(cache.read->bytes) / 1e6,
                  100.0 * cache.read->resident_before);
    row("cache read", text + (cache.mixture.empty() ? std::string() : " (the slowest cache, " + cache.read_dir + ")"));
  }
  out << "\n";
  if (problems.empty()) out << "no problems found\n";
  for (const auto& p : problems) {
    out << "[" << to_string(p.severity) << "] " << p.area << ": " << p.what << "\n    fix: " << p.fix << "\n";
  }
  return out.str();
}

namespace {

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  // A version the library cannot give is a fact to report ("unknown"), not a reason to stop.
  if (!check_mpi_or_warn(MPI_Get_library_version(text, &length), "MPI_Get_library_version")) return "unknown";
  std::string version(text, static_cast<size_t>(length));
  version = version.substr(0, version.find('\n'));
  version = version.substr(0, version.find(", package:"));  // Open MPI: the rest is build details
  while (!version.empty() && (version.back() == ',' || version.back() == ' ' || version.back() == '\0')) version.pop_back();
  return version;
}

void collect_cache(const config::Config& config, const DoctorOptions& options, DoctorFacts& facts) {
  CacheFacts& cache = facts.cache;
  cache.dir = config.string("cache.dir");
  // train.mixture: its caches are opened as train opens them (their features must agree), and
  // each is checked, measured and verified as one cache.dir would be.
  try {
    for (const MixtureEntry& entry : parse_mixture(config.string("train.mixture"))) cache.mixture.push_back(entry.dir);
  } catch (const ConfigError& error) {
    if (facts.config_error.empty()) facts.config_error = error.what();
  }
  const std::vector<std::string> dirs = cache.mixture.empty() ? std::vector<std::string>{cache.dir} : cache.mixture;
  cache.dir = dirs.front();
  if (cache.dir.empty()) return;
  for (const std::string& dir : dirs) {
    cache.dir = dir;
    cache.exists = fs::is_directory(dir);
    cache.complete = cache.exists && fs::exists(fs::path(dir) / cache::Manifest::file_name);
    if (!cache.complete) return;  // names the first cache that is not there
  }
  cache.dir = dirs.front();
  try {
    std::vector<fs::path> paths(dirs.begin(), dirs.end());
    const auto reader =
        cache.mixture.empty() ? cache::CacheReader::open(cache.dir) : cache::CacheReader::open_mixture(paths);
    cache.samples = reader.size();
    cache.n_mels = reader.n_mels();
    cache.shards = static_cast<int>(reader.manifest().value("shards", json::array()).size());
    if (reader.manifest().contains("mixture")) {
      cache.shards = 0;
      for (const auto& part : reader.manifest()["mixture"]) cache.shards += part.value("shard_count", 0);
    }
    // The settings prep recorded are the cache's, as in train (a given one that differs fails here),
    // then the batch plan as train builds it: a batch size or bucket setting that cannot work fails too.
    if (facts.config_error.empty() && facts.roles) {
      try {
        const config::Config agreed = agree_with_cache(config, reader.manifest(), reader.dir());
        SplitSamples split = split_samples(reader.entries(), agreed.number("train.validation_fraction"),
                                           static_cast<uint64_t>(agreed.integer("train.validation_seed")));
        BatchPlanConfig plan = batch_plan_config(agreed);
        for (size_t c = 0; c < plan.mixture.size(); ++c) plan.mixture[c].first_index = reader.first_index(c);
        PlanSchedule schedule(std::move(split.train), plan, static_cast<int>(facts.roles->model_ranks().size()));
        (void)schedule.epoch(0);
      } catch (const ConfigError& error) {
        facts.config_error = error.what();
      }
    }
  } catch (const Error& error) {
    cache.open_error = error.what();
    return;
  }
  // Each cache's share of --read-bytes; the slowest stands for the mixture (it paces its batches).
  const int64_t read_bytes = options.read_bytes / static_cast<int64_t>(dirs.size());
  for (const std::string& dir : dirs) {
    try {
      const cache::SequentialRead read = cache::measure_sequential_read(dir, read_bytes);
      if (!cache.read || read.mb_per_s < cache.read->mb_per_s) {
        cache.read = read;
        cache.read_dir = dir;
      }
    } catch (const Error& error) {
      cache.open_error = error.what();
      return;
    }
  }
  if (options.verify) {
    cache.verified = true;
    for (const std::string& dir : dirs) {
      const cache::VerifyResult result = cache::verify_cache(dir);
      for (const auto& fault : result.faults) {
        if (cache.verify_faults.size() >= 5) break;
        cache.verify_faults.push_back((cache.mixture.empty() ? "" : dir + "/") + fault.file +
                                      (fault.sample_id.empty() ? "" : " sample " + fault.sample_id) + ": " + fault.problem);
      }
    }
  }
}

}  // namespace

DoctorFacts collect_facts(const MpiSession& session, const config::Config* config, const std::string& config_error,
                          const DoctorOptions& options) {
  DoctorFacts facts;
  facts.gpus = transport::gpu_environment();
  facts.torch = model::torch_facts();
  facts.hdf5_version = cache::hdf5_version();
  facts.launch.mpi_library = mpi_library_version();
  facts.launch.launcher = launcher_from_env([](const char* name) { return std::getenv(name); });
  facts.launch.world_size = session.size();
  facts.launch.in_slurm_job = std::getenv("SLURM_JOB_ID") != nullptr;
  facts.launch.allocator = allocator_in_use();
  facts.machine_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  facts.usable_cores = usable_cores();
  facts.config_error = config_error;
  facts.config_loaded = config != nullptr;
  if (config == nullptr) return facts;

  facts.model_device = config->string("model.device");
  facts.transport_requested = config->string("roles.transport");
  facts.reader_threads = static_cast<int>(config->integer("train.reader_threads"));

  // The topology: this launch's ranks, or --ranks N spread over --nodes M.
  std::vector<std::string> hosts;
  if (options.ranks > 0 && session.size() == 1) {
    const int nodes = std::max(1, options.nodes);
    for (int r = 0; r < options.ranks; ++r) {
      // Block distribution, as mpirun --map-by node would not do but srun/-N does by default.
      const int node = static_cast<int>(static_cast<int64_t>(r) * nodes / options.ranks);
      hosts.push_back(nodes == 1 ? host_name() : "node" + std::to_string(node));
    }
  } else {
    for (int r = 0; r < session.size(); ++r) hosts.push_back(session.host_of(r));
  }
  facts.planned_ranks = static_cast<int>(hosts.size());
  const bool wants_gpu = facts.model_device == "cuda";
  // As run_train: a CPU run plans without GPUs; a CUDA run with the GPUs libtorch sees.
  facts.gpus_per_node = wants_gpu ? (options.gpus_per_node >= 0 ? options.gpus_per_node : facts.torch.cuda_devices) : 0;
  const RolePlanRequest request = role_plan_request(*config, std::move(hosts), facts.gpus_per_node);
  if (facts.config_error.empty()) {
    try {
      facts.roles = plan_roles(request);
      model::ModelConfig model;
      model.kind = config->string("model.kind");
      model.size = config->string("model.size");
      model.torchscript_path = config->string("model.torchscript_path");
      model.dropout = config->number("model.dropout");
      model::validate(model);
    } catch (const ConfigError& error) {
      facts.config_error = error.what();
    }
  }
  if (facts.roles) {
    const RankPlacement& me = facts.roles->at(std::min(session.rank(), facts.planned_ranks - 1));
    const int ranks_here = std::max(1, session.local_size());
    const int threads = me.role == Role::data ? facts.reader_threads + 1
                                              : std::max(1, facts.usable_cores / ranks_here);
    facts.binding_warning = binding_warning(threads);
  }
  collect_cache(*config, options, facts);
  return facts;
}

int run_doctor(const MpiSession& session, const config::Config* config, const std::string& config_error,
               const DoctorOptions& options) {
  if (session.rank() != 0) return 0;  // rank 0 speaks for the launch
  const DoctorFacts facts = collect_facts(session, config, config_error, options);
  const std::vector<Problem> problems = diagnose(facts);
  if (options.json) {
    std::cout << to_json(facts, problems).dump(2) << "\n";
  } else {
    std::cout << to_table(facts, problems);
  }
  std::cout.flush();
  return has_blocking(problems) ? 1 : 0;
}

}  // namespace sluice::runtime
