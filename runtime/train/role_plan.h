#pragma once
// Who does what in `sluice train`: every rank is a data rank (reads the cache, collates, sends
// batches) or a model rank (trains); in one process, one rank does both through an in-process
// channel. Computed identically on every rank from the topology and the config, without messages.
//
// Rules (docs/architecture.md, "Roles"):
//  - Nodes are the distinct host names, in order of their lowest rank. On each node the first
//    `data_per_node` local ranks are data ranks (local rank 0 first: on a dual-GPU node rank 0
//    prepares on GPU 0 and rank 1 trains on GPU 1), the rest model ranks. data_per_node = -1
//    (auto) means 1 on a node with two or more ranks, 0 on a node with one.
//  - An explicit role list (`roles.layout: data,model,model`) overrides that.
//  - Python model ranks (a training script's sluice.Feed(), docs/python.md): with any in the job,
//    they are the model ranks and every sluice rank is a data rank (roles.layout may say so, and
//    must not make a Python rank a data rank).
//  - Each model rank is fed by exactly one data rank: one on its own node, round-robin, where the
//    node has any; otherwise the data rank feeding the fewest model ranks.
//  - A rank's GPU is its local rank modulo the node's visible GPUs (none on a CPU run).
//  - Transport `auto`: mpi without GPUs; cuda_ipc when a data rank and a model rank it feeds
//    share a GPU; nccl otherwise.
//  - The GPU memory fractions of the ranks sharing one GPU add up to at most 1.
// Invalid plans are ConfigErrors that say what to change.
#include <string>
#include <utility>
#include <vector>

namespace sluice::runtime {

enum class Role { data, model, data_and_model };
const char* to_string(Role role);

struct RankPlacement {
  int rank = 0;
  std::string host;
  int node = 0;
  int local_rank = 0;
  int gpu = -1;  // -1: CPU
  Role role = Role::model;
  std::vector<int> feeds;  // model ranks this data rank feeds
  int fed_by = -1;         // the data rank feeding this model rank
  bool python = false;     // a Python model rank (sluice.Feed() in a training script)
};

// "model", or "model (python)" for a Python rank: the role plan's and the timeline's name.
std::string role_name(const RankPlacement& placement);

struct RolePlanRequest {
  RolePlanRequest() = default;
  // The hosts alone, every other field at its default (`plan_roles({{"n1", "n1"}})`).
  RolePlanRequest(std::vector<std::string> rank_hosts) : hosts(std::move(rank_hosts)) {}  // NOLINT(google-explicit-constructor)

  std::vector<std::string> hosts;    // host of every rank, index = rank
  int gpus_per_node = 0;             // visible GPUs on each node (0: CPU run)
  int data_per_node = -1;            // -1: auto
  std::vector<std::string> layout;   // explicit role per rank ("data"/"model"), or empty
  std::string transport = "auto";    // auto | inproc | mpi | nccl | cuda_ipc
  bool model_needs_gpu = false;      // model.device is cuda
  // roles.model_gpu_memory_fraction / roles.data_gpu_memory_fraction (0: no cap). Ranks sharing a
  // GPU must not be promised more than all of it.
  double model_gpu_memory_fraction = 0;
  double data_gpu_memory_fraction = 0;
  std::vector<int> python_ranks;     // ranks that are Python model ranks (job_agreement.h)
};

struct RolePlan {
  std::vector<RankPlacement> ranks;
  std::string transport;  // resolved: inproc | mpi | nccl | cuda_ipc

  std::vector<int> model_ranks() const;
  std::vector<int> data_ranks() const;
  const RankPlacement& at(int rank) const { return ranks.at(static_cast<size_t>(rank)); }
  // The table rank 0 prints before anything runs: rank, host, GPU, role, feeds / fed by.
  std::string table() const;
};

RolePlan plan_roles(const RolePlanRequest& request);

}  // namespace sluice::runtime
