#include "common/slurm_env.h"

#include <cstdlib>
#include <set>

#include "common/error.h"
#include "common/mpi_session.h"

namespace sluice {
namespace {

constexpr int tag_disagreements = 201;
constexpr int tag_verdict = 202;

int parse_int(const char* text) {
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  // SLURM_GPUS_ON_NODE and counts are plain integers; anything else ("2(x2)") is not used.
  if (*end != '\0' || value < 0 || value > 1 << 24) return -1;
  return static_cast<int>(value);
}

// CUDA_VISIBLE_DEVICES="0,1" -> 2; "" or "NoDevFiles" (what Slurm sets without GPUs) -> 0.
int count_devices(const std::string& list) {
  if (list.empty() || list == "NoDevFiles") return 0;
  int count = 1;
  for (char c : list) count += c == ',';
  return count;
}

std::string value(const char* name, int v) { return std::string(name) + "=" + std::to_string(v); }

}  // namespace

SlurmEnv read_slurm_env(const std::function<const char*(const char*)>& get_fn) {
  const auto get = [&](const char* name) -> const char* { return get_fn ? get_fn(name) : std::getenv(name); };
  SlurmEnv env;
  env.in_job = get("SLURM_JOB_ID") != nullptr;
  if (!env.in_job) return env;
  // srun sets SLURM_STEP_ID for every task of a step. mpirun (and the orted daemons it starts with
  // srun on other nodes) hands its ranks OMPI_MCA_orte_hnp_uri; then SLURM_PROCID & co. are the
  // batch script's or the daemon's, not the rank's.
  env.srun_task = get("SLURM_STEP_ID") != nullptr && get("OMPI_MCA_orte_hnp_uri") == nullptr;
  env.proc_id = parse_int(get("SLURM_PROCID"));
  env.local_id = parse_int(get("SLURM_LOCALID"));
  env.node_id = parse_int(get("SLURM_NODEID"));
  env.step_tasks = parse_int(get("SLURM_STEP_NUM_TASKS"));
  if (env.step_tasks < 0) env.step_tasks = parse_int(get("SLURM_NTASKS"));
  env.step_nodes = parse_int(get("SLURM_STEP_NUM_NODES"));
  if (env.step_nodes < 0) env.step_nodes = parse_int(get("SLURM_NNODES"));
  env.job_nodes = parse_int(get("SLURM_JOB_NUM_NODES"));
  if (env.job_nodes < 0) env.job_nodes = parse_int(get("SLURM_NNODES"));
  env.gpus_on_node = parse_int(get("SLURM_GPUS_ON_NODE"));
  if (const char* d = get("SLURM_DISTRIBUTION")) env.distribution = d;
  if (const char* cuda = get("CUDA_VISIBLE_DEVICES")) env.cuda_visible_devices = cuda;
  return env;
}

std::vector<std::string> slurm_disagreements(const SlurmEnv& slurm, const MpiTopology& mpi) {
  std::vector<std::string> out;
  if (!slurm.in_job) return out;
  if (slurm.srun_task) {
    if (slurm.step_tasks >= 0 && slurm.step_tasks != mpi.size) {
      out.push_back(value("SLURM_STEP_NUM_TASKS", slurm.step_tasks) + " but the MPI world has " +
                    std::to_string(mpi.size) + " rank(s): srun started separate MPI jobs; launch with "
                    "`srun --mpi=pmix` (check `srun --mpi=list`) or use mpirun inside the allocation");
      return out;  // every other comparison follows from this one
    }
    if (slurm.proc_id >= 0 && slurm.proc_id != mpi.rank) {
      out.push_back(value("SLURM_PROCID", slurm.proc_id) + " but MPI rank " + std::to_string(mpi.rank) +
                    ": the MPI library did not take its rank from srun's PMIx; check `srun --mpi=pmix` and "
                    "that Open MPI was built with the same PMIx as Slurm");
    }
    if (slurm.local_id >= 0 && slurm.local_id != mpi.local_rank) {
      out.push_back(value("SLURM_LOCALID", slurm.local_id) + " but MPI local rank " +
                    std::to_string(mpi.local_rank) + " (MPI_COMM_TYPE_SHARED): Slurm and MPI group ranks into "
                    "nodes differently; check the host names (`srun hostname`) and that no two nodes share one");
    }
    if (slurm.step_nodes >= 0 && slurm.step_nodes != mpi.nodes) {
      out.push_back(value("SLURM_STEP_NUM_NODES", slurm.step_nodes) + " but the ranks report " +
                    std::to_string(mpi.nodes) + " distinct host name(s): the role plan groups ranks by host "
                    "name; check `srun hostname` on every node (duplicate or container host names)");
    } else if (slurm.node_id >= 0 && slurm.node_id != mpi.node && slurm.distribution != "arbitrary") {
      // With block or cyclic distribution (Slurm's defaults) ranks number the nodes in node-id order.
      out.push_back(value("SLURM_NODEID", slurm.node_id) + " but MPI places rank " + std::to_string(mpi.rank) +
                    " on node " + std::to_string(mpi.node) + " (hosts in order of their lowest rank): check "
                    "the host names and srun's --distribution");
    }
  } else if (slurm.job_nodes >= 0 && mpi.nodes > slurm.job_nodes) {
    out.push_back(value("SLURM_JOB_NUM_NODES", slurm.job_nodes) + " but the ranks report " +
                  std::to_string(mpi.nodes) + " distinct host names: mpirun placed ranks outside the allocation "
                  "(a --hostfile or -H overriding Slurm's node list?) or nodes report different host names");
  }
  if (slurm.cuda_visible_devices && slurm.gpus_on_node >= 0) {
    const int listed = count_devices(*slurm.cuda_visible_devices);
    if (listed > slurm.gpus_on_node) {
      out.push_back(value("SLURM_GPUS_ON_NODE", slurm.gpus_on_node) + " but CUDA_VISIBLE_DEVICES=" +
                    *slurm.cuda_visible_devices + " lists " + std::to_string(listed) +
                    ": something after Slurm widened the GPU list; do not set CUDA_VISIBLE_DEVICES in the job script");
    }
  }
  if (mpi.visible_gpus >= 0 && slurm.gpus_on_node >= 0) {
    if (mpi.visible_gpus > slurm.gpus_on_node) {
      out.push_back(value("SLURM_GPUS_ON_NODE", slurm.gpus_on_node) + " but the process sees " +
                    std::to_string(mpi.visible_gpus) + " GPU(s): check CUDA_VISIBLE_DEVICES and the cgroup "
                    "device constraint (ConstrainDevices)");
    } else if (mpi.visible_gpus == 0 && slurm.gpus_on_node > 0) {
      out.push_back(value("SLURM_GPUS_ON_NODE", slurm.gpus_on_node) + " but the process sees no GPU: check "
                    "CUDA_VISIBLE_DEVICES (" + slurm.cuda_visible_devices.value_or("unset") + ") and the CUDA driver");
    }
  }
  return out;
}

void check_slurm_topology(const MpiSession& session, double timeout_s, int visible_gpus) {
  const SlurmEnv slurm = read_slurm_env();
  // Every rank takes part whatever it finds, so nobody waits for a rank that already threw. The
  // environment of one job agrees on whether it is a Slurm job, so outside Slurm nothing is sent.
  const char* skip = std::getenv("SLUICE_SKIP_SLURM_CHECK");
  if (!slurm.in_job || (skip != nullptr && std::string(skip) == "1")) return;
  MpiTopology mpi;
  mpi.rank = session.rank();
  mpi.size = session.size();
  mpi.local_rank = session.local_rank();
  mpi.visible_gpus = visible_gpus;
  std::vector<std::string> hosts;
  for (int r = 0; r < session.size(); ++r) {
    const std::string& host = session.host_of(r);
    bool seen = false;
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (hosts[i] == host) {
        seen = true;
        if (r == session.rank()) mpi.node = static_cast<int>(i);
      }
    }
    if (!seen) {
      if (r == session.rank()) mpi.node = static_cast<int>(hosts.size());
      hosts.push_back(host);
    }
  }
  mpi.nodes = static_cast<int>(hosts.size());

  std::string mine;
  for (const auto& line : slurm_disagreements(slurm, mpi)) mine += "  " + session.describe(session.rank()) + ": " + line + "\n";
  std::string verdict = mine;
  if (session.size() > 1) {
    const auto all = gather_strings(session, mine, tag_disagreements, timeout_s, "the Slurm topology check");
    std::string joined;
    for (const auto& part : all) joined += part;
    verdict = broadcast_string(session, joined, tag_verdict, timeout_s, "the Slurm topology verdict");
  }
  if (!verdict.empty()) {
    throw ConfigError("Slurm's view of the job disagrees with MPI's (the role plan would be wrong):\n" + verdict +
                      "  (set SLUICE_SKIP_SLURM_CHECK=1 to run anyway)");
  }
}

}  // namespace sluice
