// Slurm's topology against MPI's: the environment reader and the pure comparison.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "common/slurm_env.h"

namespace sluice {
namespace {

using Env = std::map<std::string, std::string>;

SlurmEnv read(const Env& env) {
  return read_slurm_env([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// What srun gives task `procid` of a step with `tasks` tasks on `nodes` nodes.
Env srun_task(int procid, int localid, int nodeid, int tasks, int nodes) {
  return {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_NODEID", std::to_string(nodeid)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(tasks)},
          {"SLURM_NTASKS", std::to_string(tasks)},
          {"SLURM_STEP_NUM_NODES", std::to_string(nodes)},
          {"SLURM_NNODES", std::to_string(nodes)},
          {"SLURM_JOB_NUM_NODES", std::to_string(nodes)}};
}

MpiTopology mpi(int rank, int size, int local_rank, int node, int nodes, int gpus = -1) {
  MpiTopology t;
  t.rank = rank;
  t.size = size;
  t.local_rank = local_rank;
  t.node = node;
  t.nodes = nodes;
  t.visible_gpus = gpus;
  return t;
}

TEST(SlurmEnv, OutsideSlurmNothingIsRead) {
  const SlurmEnv env = read({{"SLURM_PROCID", "3"}});
  EXPECT_FALSE(env.in_job);
  EXPECT_TRUE(slurm_disagreements(env, mpi(0, 1, 0, 0, 1)).empty());
}

TEST(SlurmEnv, ReadsSrunTask) {
  Env e = srun_task(3, 1, 1, 4, 2);
  e["SLURM_GPUS_ON_NODE"] = "2";
  e["CUDA_VISIBLE_DEVICES"] = "0,1";
  const SlurmEnv env = read(e);
  EXPECT_TRUE(env.in_job);
  EXPECT_TRUE(env.srun_task);
  EXPECT_EQ(env.proc_id, 3);
  EXPECT_EQ(env.local_id, 1);
  EXPECT_EQ(env.node_id, 1);
  EXPECT_EQ(env.step_tasks, 4);
  EXPECT_EQ(env.step_nodes, 2);
  EXPECT_EQ(env.gpus_on_node, 2);
  EXPECT_EQ(env.cuda_visible_devices.value_or(""), "0,1");
}

TEST(SlurmEnv, MpirunRanksAreNotSrunTasks) {
  Env e = srun_task(0, 0, 0, 2, 1);
  e["OMPI_MCA_orte_hnp_uri"] = "123.0;tcp://10.0.0.1:4000";
  EXPECT_FALSE(read(e).srun_task);
  e.erase("OMPI_MCA_orte_hnp_uri");
  e.erase("SLURM_STEP_ID");  // the batch script itself
  EXPECT_FALSE(read(e).srun_task);
}

TEST(SlurmEnv, AgreeingSrunStepHasNoDisagreement) {
  // 2 nodes x 2 tasks, block distribution: ranks 0,1 on node 0, ranks 2,3 on node 1.
  for (int rank = 0; rank < 4; ++rank) {
    const auto env = read(srun_task(rank, rank % 2, rank / 2, 4, 2));
    EXPECT_TRUE(slurm_disagreements(env, mpi(rank, 4, rank % 2, rank / 2, 2)).empty()) << rank;
  }
}

TEST(SlurmEnv, SeparateOneRankWorldsAreNamed) {
  const auto lines = slurm_disagreements(read(srun_task(2, 2, 0, 3, 1)), mpi(0, 1, 0, 0, 1));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("SLURM_STEP_NUM_TASKS=3 but the MPI world has 1 rank"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("--mpi=pmix"), std::string::npos) << lines[0];
}

TEST(SlurmEnv, LocalIdAndProcIdDisagreementsNameBothValues) {
  const auto lines = slurm_disagreements(read(srun_task(1, 1, 0, 4, 2)), mpi(2, 4, 0, 0, 2));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("SLURM_PROCID=1 but MPI rank 2"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("SLURM_LOCALID=1 but MPI local rank 0"), std::string::npos) << lines[1];
}

TEST(SlurmEnv, NodeCountAgainstDistinctHosts) {
  // Two nodes with the same host name (containers): MPI sees one host.
  const auto lines = slurm_disagreements(read(srun_task(0, 0, 0, 4, 2)), mpi(0, 4, 0, 0, 1));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("SLURM_STEP_NUM_NODES=2 but the ranks report 1 distinct host name"), std::string::npos)
      << lines[0];
}

TEST(SlurmEnv, NodeIdOrderUnlessArbitraryDistribution) {
  Env e = srun_task(0, 0, 1, 4, 2);
  auto lines = slurm_disagreements(read(e), mpi(0, 4, 0, 0, 2));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("SLURM_NODEID=1 but MPI places rank 0 on node 0"), std::string::npos) << lines[0];
  e["SLURM_DISTRIBUTION"] = "arbitrary";
  EXPECT_TRUE(slurm_disagreements(read(e), mpi(0, 4, 0, 0, 2)).empty());
}

TEST(SlurmEnv, MpirunInsideAllocationChecksOnlyTheNodeCount) {
  // The batch script's values (PROCID 0, LOCALID 0) do not describe mpirun's rank 3.
  Env e = srun_task(0, 0, 0, 2, 2);
  e["OMPI_MCA_orte_hnp_uri"] = "uri";
  EXPECT_TRUE(slurm_disagreements(read(e), mpi(3, 4, 1, 1, 2)).empty());
  const auto lines = slurm_disagreements(read(e), mpi(3, 4, 1, 2, 3));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("SLURM_JOB_NUM_NODES=2 but the ranks report 3 distinct host names"), std::string::npos)
      << lines[0];
}

TEST(SlurmEnv, Gpus) {
  Env e = srun_task(0, 0, 0, 2, 1);
  e["SLURM_GPUS_ON_NODE"] = "1";
  e["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto lines = slurm_disagreements(read(e), mpi(0, 2, 0, 0, 1, 2));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("SLURM_GPUS_ON_NODE=1 but CUDA_VISIBLE_DEVICES=0,1 lists 2"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("SLURM_GPUS_ON_NODE=1 but the process sees 2 GPU(s)"), std::string::npos) << lines[1];
  e["SLURM_GPUS_ON_NODE"] = "2";
  EXPECT_TRUE(slurm_disagreements(read(e), mpi(0, 2, 0, 0, 1, 2)).empty());
  // --gpus-per-task=1: each task sees one of the node's two GPUs; fine.
  e["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_TRUE(slurm_disagreements(read(e), mpi(0, 2, 0, 0, 1, 1)).empty());
  lines = slurm_disagreements(read(e), mpi(0, 2, 0, 0, 1, 0));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("sees no GPU"), std::string::npos) << lines[0];
  // A CPU run (visible_gpus -1) does not look at the process's GPUs.
  EXPECT_TRUE(slurm_disagreements(read(e), mpi(0, 2, 0, 0, 1, -1)).empty());
}

}  // namespace
}  // namespace sluice
