#include "runtime/train/role_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/error.h"

namespace sluice::runtime {
namespace {

std::string join(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

}  // namespace

const char* to_string(Role role) {
  switch (role) {
    case Role::data: return "data";
    case Role::model: return "model";
    case Role::data_and_model: return "data+model";
  }
  return "?";
}

std::string role_name(const RankPlacement& placement) {
  return std::string(to_string(placement.role)) + (placement.python ? " (python)" : "");
}

std::vector<int> RolePlan::model_ranks() const {
  std::vector<int> result;
  for (const auto& placement : ranks) {
    if (placement.role != Role::data) result.push_back(placement.rank);
  }
  return result;
}

std::vector<int> RolePlan::data_ranks() const {
  std::vector<int> result;
  for (const auto& placement : ranks) {
    if (placement.role != Role::model) result.push_back(placement.rank);
  }
  return result;
}

std::string RolePlan::table() const {
  std::ostringstream out;
  out << "role plan (" << ranks.size() << " rank(s), transport " << transport << ")\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-5s %-16s %-5s %-11s %s\n", "rank", "host", "gpu", "role", "feeds / fed by");
  out << line;
  for (const auto& p : ranks) {
    std::string link = p.role == Role::data ? "feeds " + join(p.feeds)
                       : p.role == Role::model ? "fed by " + std::to_string(p.fed_by)
                                               : "itself (in-process)";
    std::snprintf(line, sizeof(line), "  %-5d %-16s %-5s %-11s %s\n", p.rank, p.host.substr(0, 16).c_str(),
                  p.gpu < 0 ? "cpu" : std::to_string(p.gpu).c_str(), role_name(p).c_str(), link.c_str());
    out << line;
  }
  return out.str();
}

namespace {

// Nodes and local ranks from the host names (nodes in order of their lowest rank), and each
// rank's GPU. Returns the number of ranks on each node.
std::vector<int> place_ranks(const RolePlanRequest& request, RolePlan& plan) {
  std::map<std::string, int> node_of_host;
  std::vector<int> ranks_on_node;
  for (size_t rank = 0; rank < request.hosts.size(); ++rank) {
    auto& p = plan.ranks[rank];
    p.rank = static_cast<int>(rank);
    p.host = request.hosts[rank];
    auto [it, inserted] = node_of_host.emplace(p.host, static_cast<int>(ranks_on_node.size()));
    if (inserted) ranks_on_node.push_back(0);
    p.node = it->second;
    p.local_rank = ranks_on_node[static_cast<size_t>(p.node)]++;
    p.gpu = request.gpus_per_node > 0 ? p.local_rank % request.gpus_per_node : -1;
  }
  return ranks_on_node;
}

// One process feeds itself in-process.
void plan_one_process(const RolePlanRequest& request, RolePlan& plan) {
  plan.ranks[0].role = Role::data_and_model;
  plan.transport = "inproc";
  if (request.transport != "auto" && request.transport != "inproc") {
    throw ConfigError("roles.transport = " + request.transport +
                      " needs two or more ranks; one process feeds itself in-process (set "
                      "roles.transport: auto, or launch with mpirun -np 2 or more)");
  }
  if (request.model_needs_gpu && request.gpus_per_node == 0) {
    throw ConfigError("model.device asks for a GPU but none is visible: set model.device: cpu");
  }
}

// Python ranks train (a script cannot read the cache for others), and the model ranks of one
// job are all Python or all sluice: a Python rank cannot join the C++ model loop's all-reduce.
void mark_python_ranks(const RolePlanRequest& request, RolePlan& plan) {
  for (int rank : request.python_ranks) {
    auto& p = plan.ranks.at(static_cast<size_t>(rank));
    if (p.role == Role::data) {
      throw ConfigError("roles.layout makes rank " + std::to_string(rank) +
                        " a data rank, but it is a Python rank (sluice.Feed()), which can only train: make it a "
                        "model rank and the sluice ranks data ranks");
    }
    p.python = true;
  }
  if (request.python_ranks.empty()) return;
  for (const auto& p : plan.ranks) {
    if (p.role != Role::data && !p.python) {
      throw ConfigError("rank " + std::to_string(p.rank) + " is a sluice model rank in a job with Python model ranks: "
                        "the model ranks of one job are all Python or all sluice; make the sluice ranks data ranks "
                        "(roles.layout) or launch more Python ranks");
    }
  }
}

// Roles from roles.layout when given, else the first data_per_node local ranks of each node;
// at least one of each.
void assign_roles(const RolePlanRequest& request, const std::vector<int>& ranks_on_node, RolePlan& plan) {
  const int size = static_cast<int>(plan.ranks.size());
  if (!request.layout.empty()) {
    if (static_cast<int>(request.layout.size()) != size) {
      throw ConfigError("roles.layout names " + std::to_string(request.layout.size()) +
                        " role(s) but the job has " + std::to_string(size) +
                        " ranks: give one role (data or model) per rank");
    }
    for (int rank = 0; rank < size; ++rank) {
      const std::string& role = request.layout[static_cast<size_t>(rank)];
      if (role != "data" && role != "model") {
        throw ConfigError("roles.layout entry " + std::to_string(rank) + " is '" + role +
                          "': each entry must be data or model");
      }
      plan.ranks[static_cast<size_t>(rank)].role = role == "data" ? Role::data : Role::model;
    }
  } else if (!request.python_ranks.empty()) {
    for (auto& p : plan.ranks) p.role = Role::data;
    for (int rank : request.python_ranks) plan.ranks.at(static_cast<size_t>(rank)).role = Role::model;
  } else {
    for (auto& p : plan.ranks) {
      const int on_node = ranks_on_node[static_cast<size_t>(p.node)];
      const int data_here = request.data_per_node >= 0 ? request.data_per_node : (on_node >= 2 ? 1 : 0);
      p.role = p.local_rank < data_here ? Role::data : Role::model;
    }
  }
  mark_python_ranks(request, plan);
  if (plan.data_ranks().empty()) {
    throw ConfigError("no data rank in a " + std::to_string(size) +
                      "-rank job: set roles.data_per_node to 1 or more (or list roles.layout)");
  }
  if (plan.model_ranks().empty()) {
    throw ConfigError("no model rank: every rank is a data rank; lower roles.data_per_node");
  }
}

// Feeders: same node round-robin where possible, else the least-loaded data rank; every data
// rank must feed someone.
void assign_feeders(size_t nodes, RolePlan& plan) {
  const auto data = plan.data_ranks();
  std::vector<size_t> next_on_node(nodes, 0);
  for (int m : plan.model_ranks()) {
    auto& target = plan.ranks[static_cast<size_t>(m)];
    std::vector<int> local;
    for (int d : data) {
      if (plan.ranks[static_cast<size_t>(d)].node == target.node) local.push_back(d);
    }
    int feeder;
    if (!local.empty()) {
      feeder = local[next_on_node[static_cast<size_t>(target.node)]++ % local.size()];
    } else {
      feeder = *std::min_element(data.begin(), data.end(), [&](int a, int b) {
        return plan.ranks[static_cast<size_t>(a)].feeds.size() < plan.ranks[static_cast<size_t>(b)].feeds.size();
      });
    }
    target.fed_by = feeder;
    plan.ranks[static_cast<size_t>(feeder)].feeds.push_back(m);
  }
  for (int d : data) {
    if (plan.ranks[static_cast<size_t>(d)].feeds.empty()) {
      throw ConfigError("data rank " + std::to_string(d) + " (host " + plan.ranks[static_cast<size_t>(d)].host +
                        ") would feed no model rank: lower roles.data_per_node or add model ranks");
    }
  }
}

// A GPU model needs a GPU, and one per model rank on every node.
void check_model_gpus(const RolePlanRequest& request, size_t nodes, const RolePlan& plan) {
  if (!request.model_needs_gpu) return;
  if (request.gpus_per_node == 0) {
    throw ConfigError("model.device asks for a GPU but none is visible: set model.device: cpu");
  }
  const auto model = plan.model_ranks();
  for (size_t node = 0; node < nodes; ++node) {
    int model_here = 0;
    std::string host;
    for (int m : model) {
      if (plan.at(m).node != static_cast<int>(node)) continue;
      ++model_here;
      host = plan.at(m).host;
    }
    if (model_here > request.gpus_per_node) {
      throw ConfigError("node " + host + " has " +
                        std::to_string(model_here) + " model ranks but " + std::to_string(request.gpus_per_node) +
                        " GPU(s): start fewer ranks per node or raise roles.data_per_node");
    }
  }
}

// Whether some model rank shares its GPU with the data rank feeding it.
bool feeder_shares_a_gpu(const RolePlan& plan) {
  bool shared_gpu = false;
  for (int m : plan.model_ranks()) {
    const auto& target = plan.at(m);
    const auto& feeder = plan.at(target.fed_by);
    shared_gpu |= target.gpu >= 0 && feeder.node == target.node && feeder.gpu == target.gpu;
  }
  return shared_gpu;
}

// roles.transport resolved (auto: mpi without GPUs, cuda_ipc on a shared GPU, else nccl) and
// checked against what this job has.
std::string choose_transport(const RolePlanRequest& request, bool shared_gpu) {
  std::string transport = request.transport;
  if (transport == "auto") transport = request.gpus_per_node == 0 ? "mpi" : (shared_gpu ? "cuda_ipc" : "nccl");
  if (transport == "inproc") {
    throw ConfigError("roles.transport = inproc works only in one process; use mpi (CPU) or nccl/cuda_ipc (GPU)");
  }
  if ((transport == "nccl" || transport == "cuda_ipc") && request.gpus_per_node == 0) {
    throw ConfigError("roles.transport = " + transport + " needs GPUs and none is visible: use mpi");
  }
  return transport;
}

// Caps that together exceed a shared GPU would fail late, as an out-of-memory error in the
// middle of training on whichever rank allocates last: refuse them before anything runs.
void check_memory_fractions(const RolePlanRequest& request, const RolePlan& plan) {
  if (request.gpus_per_node <= 0) return;
  std::map<std::pair<int, int>, double> promised;  // (node, gpu) -> sum of fractions
  std::map<std::pair<int, int>, std::string> sharers, host;
  for (const RankPlacement& placement : plan.ranks) {
    if (placement.gpu < 0) continue;
    const double fraction = placement.role == Role::data ? request.data_gpu_memory_fraction
                                                         : request.model_gpu_memory_fraction;
    const auto key = std::make_pair(placement.node, placement.gpu);
    promised[key] += fraction;
    host[key] = placement.host;
    sharers[key] += (sharers[key].empty() ? "" : ", ") + std::string("rank ") + std::to_string(placement.rank) +
                    " (" + to_string(placement.role) + ")";
  }
  for (const auto& [key, total] : promised) {
    if (total > 1.0 + 1e-9) {
      char sum[32];
      std::snprintf(sum, sizeof(sum), "%.2f", total);
      throw ConfigError("GPU " + std::to_string(key.second) + " of host " + host[key] + " is shared by " +
                        sharers[key] + " whose memory fractions add up to " + sum +
                        ": lower roles.model_gpu_memory_fraction / roles.data_gpu_memory_fraction so that "
                        "they sum to at most 1");
    }
  }
}

}  // namespace

RolePlan plan_roles(const RolePlanRequest& request) {
  if (request.hosts.empty()) throw ConfigError("no ranks to plan");
  RolePlan plan;
  plan.ranks.resize(request.hosts.size());
  const std::vector<int> ranks_on_node = place_ranks(request, plan);
  if (plan.ranks.size() == 1) {
    plan_one_process(request, plan);
    plan.ranks[0].python = !request.python_ranks.empty();
    return plan;
  }
  assign_roles(request, ranks_on_node, plan);
  assign_feeders(ranks_on_node.size(), plan);
  check_model_gpus(request, ranks_on_node.size(), plan);
  const bool shared_gpu = feeder_shares_a_gpu(plan);
  plan.transport = choose_transport(request, shared_gpu);
  check_memory_fractions(request, plan);
  if (plan.transport == "nccl" && shared_gpu) {
    throw ConfigError(
        "roles.transport = nccl but a data rank and the model rank it feeds share a GPU, which NCCL "
        "refuses: use roles.transport: cuda_ipc, or one rank per GPU");
  }
  return plan;
}

}  // namespace sluice::runtime
