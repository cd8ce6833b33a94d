#pragma once
// `sluice doctor`: what this machine, this MPI launch, this config and this cache look like to
// sluice, and the problems that would stop or slow `sluice train`, each with its fix.
//
// Gathering facts (collect_facts) talks to CUDA, MPI, HDF5, libtorch and the file system;
// judging them (diagnose) is a pure function of those facts, so the checks are unit-tested
// without a GPU, a cluster or a cache. The config is loaded through the same schema and the role
// plan built with the same plan_roles call as `sluice train`, so an invalid setup fails here with
// the words `train` would use.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/cache_facts.h"
#include "common/config.h"
#include "common/mpi_session.h"
#include "model/device_facts.h"
#include "runtime/train/role_plan.h"
#include "runtime/transport/gpu_facts.h"

namespace sluice::runtime {

enum class Severity { blocking, warning, note };
const char* to_string(Severity severity);

struct Problem {
  Severity severity = Severity::note;
  std::string area;  // "gpu", "mpi", "config", "cache", "cpu"
  std::string what;  // what is wrong, with the setting, file or rank it concerns
  std::string fix;   // what to do about it
};

// How this process was started, read from the environment the launcher leaves.
struct LaunchFacts {
  std::string mpi_library;  // MPI_Get_library_version, first line
  std::string launcher;     // "mpirun (Open MPI)", "srun", "mpiexec (Hydra)", "singleton"
  int world_size = 1;       // ranks in this launch
  bool in_slurm_job = false;
  std::string allocator;    // allocator_in_use(): "tcmalloc (...)" or "system ..."
};

// Reads the launcher from environment variables through `lookup` (null: unset). Pure.
std::string launcher_from_env(const std::function<const char*(const char*)>& lookup);

struct CacheFacts {
  std::string dir;          // cache.dir ("" when not set); with train.mixture the first cache, or
                            // the first that is missing or unfinished
  std::vector<std::string> mixture;  // train.mixture's caches, each checked as cache.dir is
  std::string read_dir;     // the cache `read` measured: with a mixture, the slowest
  bool exists = false;      // the directory exists
  bool complete = false;    // manifest.json present
  std::string open_error;   // CacheReader::open's error, "" when it opened
  int64_t samples = 0;
  int shards = 0;
  int n_mels = 0;
  std::optional<cache::SequentialRead> read;  // the sequential read measurement, when taken
  bool verified = false;    // a full verify ran in this doctor run (on every cache of a mixture)
  std::vector<std::string> verify_faults;  // its faults (first few), when it ran; a mixture's name their cache
};

struct DoctorFacts {
  transport::GpuEnvironment gpus;
  model::TorchFacts torch;
  std::string hdf5_version;
  LaunchFacts launch;
  int machine_cores = 1;  // hardware threads of this machine
  int usable_cores = 1;   // this process's CPU affinity
  std::string binding_warning;  // common/host.h binding_warning for this rank's threads, "" if none

  // The config and the plan that `sluice train` would run with.
  bool config_loaded = true;  // false: the file or an override did not load (config_error says why)
  std::string config_error;  // a ConfigError from loading, planning or validating; "" when valid
  std::string model_device;  // "cpu" | "cuda"
  std::string transport_requested;
  int reader_threads = 0;
  int planned_ranks = 1;         // ranks the plan was made for
  int gpus_per_node = 0;         // what the plan was given
  std::optional<RolePlan> roles;  // absent when the config or the plan is invalid
  CacheFacts cache;
};

// The problems in `facts`, blocking ones first. Pure.
std::vector<Problem> diagnose(const DoctorFacts& facts);
bool has_blocking(const std::vector<Problem>& problems);

// Splits a ConfigError message "what is wrong: what to do" into what and fix where the part after
// the last ": " reads as an instruction (use/set/start/...); else the fix says to change the
// setting the message names. Pure.
Problem problem_from_config_error(const std::string& message);

// Threads of `sluice train` on the first node of `roles` that each need a core: one compute
// thread per model rank (run_train sizes the compute pool to share the cores), reader_threads + 1
// (readers and the sender) per data rank, both in one process. Pure.
int planned_threads_on_first_node(const RolePlan& roles, int reader_threads);

nlohmann::json to_json(const DoctorFacts& facts, const std::vector<Problem>& problems);
std::string to_table(const DoctorFacts& facts, const std::vector<Problem>& problems);

struct DoctorOptions {
  int ranks = 0;          // plan for this many ranks (0: the launch's size)
  int nodes = 1;          // spread `ranks` over this many nodes (names node0, node1, ...)
  int gpus_per_node = -1;  // plan with this many GPUs per node (-1: those visible here)
  bool verify = false;    // read every chunk of the cache (sluice cache verify)
  int64_t read_bytes = 1LL << 30;  // the sequential read reads at most this much
  bool json = false;
};

// Collects the facts (rank 0 of the launch), prints the table or JSON on rank 0, and returns 1
// when a problem is blocking, else 0. `config` may fail to load: pass its error instead.
DoctorFacts collect_facts(const MpiSession& session, const config::Config* config, const std::string& config_error,
                          const DoctorOptions& options);
int run_doctor(const MpiSession& session, const config::Config* config, const std::string& config_error,
               const DoctorOptions& options);

}  // namespace sluice::runtime
