#pragma once
// Slurm's view of where a rank runs, checked against MPI's view.
//
// Under `srun`, every task carries Slurm's idea of its place (SLURM_PROCID, SLURM_LOCALID,
// SLURM_NODEID, the step's task and node counts, SLURM_GPUS_ON_NODE); MPI has its own (world
// rank and size, MPI_COMM_TYPE_SHARED local rank, distinct host names). The role plan is built
// from MPI's view, so when the two disagree the plan is wrong in ways that only show up later as
// idle GPUs or two ranks on one GPU. The classic case: `srun --mpi=<wrong plugin>` starts N
// separate one-rank worlds instead of one N-rank job.
//
// Under `mpirun` inside an allocation the ranks inherit the SLURM_* values of the batch script or
// of the orted that started them, which say nothing about the rank: then only the node count
// (MPI's hosts must be within the allocation) and the GPUs are checked.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

class MpiSession;

struct SlurmEnv {
  bool in_job = false;     // SLURM_JOB_ID is set
  bool srun_task = false;  // started by srun as one task of a step, not by mpirun in the allocation
  int proc_id = -1;        // SLURM_PROCID
  int local_id = -1;       // SLURM_LOCALID
  int node_id = -1;        // SLURM_NODEID
  int step_tasks = -1;     // SLURM_STEP_NUM_TASKS (srun) or SLURM_NTASKS
  int step_nodes = -1;     // SLURM_STEP_NUM_NODES (srun) or SLURM_NNODES
  int job_nodes = -1;      // SLURM_JOB_NUM_NODES (the allocation)
  int gpus_on_node = -1;   // SLURM_GPUS_ON_NODE
  std::string distribution;                         // SLURM_DISTRIBUTION
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES, when set
};

// Reads the environment through `get` (default: std::getenv). Numbers that do not parse are -1.
SlurmEnv read_slurm_env(const std::function<const char*(const char*)>& get = nullptr);

// MPI's view of one rank.
struct MpiTopology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;   // among ranks on this node (MPI_COMM_TYPE_SHARED)
  int node = 0;         // index of this rank's host among distinct hosts, in order of lowest rank
  int nodes = 1;        // distinct host names
  int visible_gpus = -1;  // GPUs this process sees (-1: not asked, CPU run)
};

// Every disagreement between Slurm and MPI for this rank, one sentence each that names both
// values and what to check; empty when they agree or when not inside a Slurm job.
std::vector<std::string> slurm_disagreements(const SlurmEnv& slurm, const MpiTopology& mpi);

// Reads the environment, compares on every rank, and agrees across ranks (gather to rank 0 and
// broadcast, with the runtime deadline): every rank throws the same ConfigError listing each
// rank's disagreements, so rank 0 can print it once. A no-op outside Slurm. `visible_gpus`: the
// GPUs the process sees when training on GPUs, else -1.
void check_slurm_topology(const MpiSession& session, double timeout_s, int visible_gpus = -1);

}  // namespace sluice
