#include <gtest/gtest.h>

#include "common/error.h"
#include "runtime/train/role_plan.h"

namespace sluice::runtime {
namespace {

std::string error_of(const RolePlanRequest& request) {
  try {
    plan_roles(request);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(RolePlan, OneProcessFeedsItself) {
  const RolePlan plan = plan_roles({{"laptop"}});
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].role, Role::data_and_model);
  EXPECT_EQ(plan.transport, "inproc");
  EXPECT_EQ(plan.model_ranks(), std::vector<int>({0}));
}

TEST(RolePlan, CpuThreeRanksOneDataTwoModel) {
  const RolePlan plan = plan_roles({{"n1", "n1", "n1"}});
  EXPECT_EQ(plan.at(0).role, Role::data);
  EXPECT_EQ(plan.at(0).feeds, std::vector<int>({1, 2}));
  EXPECT_EQ(plan.at(1).fed_by, 0);
  EXPECT_EQ(plan.at(2).fed_by, 0);
  EXPECT_EQ(plan.transport, "mpi");
  EXPECT_EQ(plan.at(1).gpu, -1);
  const std::string table = plan.table();
  EXPECT_NE(table.find("feeds 1,2"), std::string::npos) << table;
  EXPECT_NE(table.find("fed by 0"), std::string::npos) << table;
}

TEST(RolePlan, DualGpuNodeDataOnGpu0ModelOnGpu1WithNccl) {
  RolePlanRequest request{{"g", "g"}};
  request.gpus_per_node = 2;
  request.model_needs_gpu = true;
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.at(0).role, Role::data);
  EXPECT_EQ(plan.at(0).gpu, 0);
  EXPECT_EQ(plan.at(1).role, Role::model);
  EXPECT_EQ(plan.at(1).gpu, 1);
  EXPECT_EQ(plan.transport, "nccl");
}

TEST(RolePlan, TwoRanksOnOneGpuUseCudaIpcAndRefuseNccl) {
  RolePlanRequest request{{"g", "g"}};
  request.gpus_per_node = 1;
  EXPECT_EQ(plan_roles(request).transport, "cuda_ipc");
  request.transport = "nccl";
  EXPECT_NE(error_of(request).find("use roles.transport: cuda_ipc"), std::string::npos);
}

TEST(RolePlan, MemoryFractionsOfRanksSharingAGpuAddUpToAtMostOne) {
  RolePlanRequest request{{"g", "g"}};
  request.gpus_per_node = 1;
  request.model_needs_gpu = true;
  request.model_gpu_memory_fraction = 0.9;
  request.data_gpu_memory_fraction = 0.1;
  EXPECT_EQ(plan_roles(request).transport, "cuda_ipc");  // exactly 1: accepted
  request.data_gpu_memory_fraction = 0.2;
  EXPECT_EQ(error_of(request),
            "GPU 0 of host g is shared by rank 0 (data), rank 1 (model) whose memory fractions add up to 1.10: "
            "lower roles.model_gpu_memory_fraction / roles.data_gpu_memory_fraction so that they sum to at most 1");
  // On two GPUs nobody shares: each rank may take up to all of its own.
  request.gpus_per_node = 2;
  request.model_gpu_memory_fraction = 1.0;
  request.data_gpu_memory_fraction = 1.0;
  EXPECT_EQ(plan_roles(request).transport, "nccl");
}

TEST(RolePlan, MultiNodeFeedsStayOnTheirNode) {
  RolePlanRequest request{{"a", "a", "a", "b", "b", "b"}};
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.data_ranks(), std::vector<int>({0, 3}));
  EXPECT_EQ(plan.at(1).fed_by, 0);
  EXPECT_EQ(plan.at(2).fed_by, 0);
  EXPECT_EQ(plan.at(4).fed_by, 3);
  EXPECT_EQ(plan.at(5).fed_by, 3);
  EXPECT_EQ(plan.at(4).node, 1);
  EXPECT_EQ(plan.at(4).local_rank, 1);
}

TEST(RolePlan, TwoDataRanksPerNodeShareTheModelRanks) {
  RolePlanRequest request{{"a", "a", "a", "a", "a", "a"}};
  request.data_per_node = 2;
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.at(0).feeds, std::vector<int>({2, 4}));
  EXPECT_EQ(plan.at(1).feeds, std::vector<int>({3, 5}));
}

TEST(RolePlan, NodeWithoutDataRankIsFedFromAnother) {
  RolePlanRequest request{{"a", "a", "b"}};
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.at(2).role, Role::model);
  EXPECT_EQ(plan.at(2).fed_by, 0);
}

TEST(RolePlan, ExplicitLayout) {
  RolePlanRequest request{{"a", "a", "a"}};
  request.layout = {"model", "data", "model"};
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.at(1).feeds, std::vector<int>({0, 2}));
  request.layout = {"model", "data"};
  EXPECT_NE(error_of(request).find("names 2 role(s) but the job has 3 ranks"), std::string::npos);
  request.layout = {"model", "data", "trainer"};
  EXPECT_NE(error_of(request).find("'trainer'"), std::string::npos);
}

TEST(RolePlan, InvalidPlansSayWhatToChange) {
  RolePlanRequest no_data{{"a", "b"}};  // one rank per node: auto gives no data rank
  EXPECT_NE(error_of(no_data).find("set roles.data_per_node"), std::string::npos);
  RolePlanRequest all_data{{"a", "a"}};
  all_data.data_per_node = 2;
  EXPECT_NE(error_of(all_data).find("no model rank"), std::string::npos);
  RolePlanRequest idle_data{{"a", "a", "a"}};
  idle_data.data_per_node = 2;
  EXPECT_NE(error_of(idle_data).find("data rank 1 (host a) would feed no model rank"), std::string::npos);
  RolePlanRequest too_many{{"a", "a", "a", "a"}};
  too_many.data_per_node = 3;
  EXPECT_NE(error_of(too_many).find("would feed no model rank"), std::string::npos);
  RolePlanRequest gpu_short{{"g", "g", "g"}};
  gpu_short.gpus_per_node = 1;
  gpu_short.model_needs_gpu = true;
  EXPECT_NE(error_of(gpu_short).find("2 model ranks but 1 GPU(s)"), std::string::npos);
  // The node short of GPUs is named, not the first node with a model rank.
  RolePlanRequest second_node_short{{"g1", "g1", "g2", "g2", "g2"}};
  second_node_short.gpus_per_node = 1;
  second_node_short.model_needs_gpu = true;
  EXPECT_NE(error_of(second_node_short).find("node g2 has 2 model ranks but 1 GPU(s)"), std::string::npos)
      << error_of(second_node_short);
  RolePlanRequest no_gpu{{"a", "a"}};
  no_gpu.transport = "nccl";
  EXPECT_NE(error_of(no_gpu).find("needs GPUs"), std::string::npos);
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

// Python model ranks (docs/python.md): with any in the job they train and the sluice ranks feed.
TEST(RolePlanPython, PythonRanksAreModelRanksFedByTheSluiceRank) {
  RolePlanRequest request({"n1", "n1", "n1"});
  request.python_ranks = {1, 2};
  const RolePlan plan = plan_roles(request);
  EXPECT_EQ(plan.at(0).role, Role::data);
  EXPECT_EQ(plan.at(0).feeds, (std::vector<int>{1, 2}));
  for (int rank : {1, 2}) {
    EXPECT_EQ(plan.at(rank).role, Role::model);
    EXPECT_TRUE(plan.at(rank).python);
    EXPECT_EQ(role_name(plan.at(rank)), "model (python)");
  }
  EXPECT_FALSE(plan.at(0).python);
  EXPECT_NE(plan.table().find("model (python) fed by 0"), std::string::npos) << plan.table();
}

TEST(RolePlanPython, LayoutThatMakesAPythonRankADataRankIsAConfigError) {
  RolePlanRequest request({"n1", "n1", "n1"});
  request.layout = {"model", "data", "model"};
  request.python_ranks = {1, 2};
  EXPECT_THROW(plan_roles(request), ConfigError);
}

TEST(RolePlanPython, SluiceAndPythonModelRanksDoNotMix) {
  RolePlanRequest request({"n1", "n1", "n1"});
  request.layout = {"data", "model", "model"};
  request.python_ranks = {2};
  try {
    plan_roles(request);
    FAIL() << "a sluice model rank beside a Python one was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1 is a sluice model rank"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace sluice::runtime
