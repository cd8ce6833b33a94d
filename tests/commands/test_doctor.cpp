// `sluice doctor`'s checks as pure functions of the facts: no GPU, cluster or cache needed.
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "model/device_facts.h"
#include "commands/doctor.h"

namespace sluice::runtime {
namespace {

// A healthy one-process CPU run on 8 cores with a finished, opened cache.
DoctorFacts healthy() {
  DoctorFacts facts;
  facts.gpus.cuda_compiled = true;
  facts.gpus.nccl_compiled = true;
  facts.gpus.problem = "cudaErrorNoDevice: no CUDA-capable device is detected";
  facts.torch.version = "1.13.0";
  facts.launch.launcher = "singleton";
  facts.machine_cores = 8;
  facts.usable_cores = 8;
  facts.model_device = "cpu";
  facts.transport_requested = "auto";
  facts.reader_threads = 2;
  RolePlanRequest request;
  request.hosts = {"n1"};
  facts.roles = plan_roles(request);
  facts.cache.dir = "/scratch/cache";
  facts.cache.exists = true;
  facts.cache.complete = true;
  facts.cache.samples = 120;
  facts.cache.verified = true;
  return facts;
}

// A copy: callers often pass a temporary list.
std::optional<Problem> find(const std::vector<Problem>& problems, const std::string& area, Severity severity) {
  for (const auto& p : problems) {
    if (p.area == area && p.severity == severity) return p;
  }
  return std::nullopt;
}

TEST(Doctor, AHealthyCpuRunHasNoProblemAndNoGpuIsNotOne) {
  const auto problems = diagnose(healthy());
  EXPECT_TRUE(problems.empty()) << problems.front().what;
  EXPECT_FALSE(has_blocking(problems));
  const auto json = to_json(healthy(), problems);
  EXPECT_EQ(json["gpu"]["visible"], "none visible");
  EXPECT_EQ(json["blocking"], false);
  EXPECT_EQ(json["config"]["transport"], "inproc");
  EXPECT_EQ(json["cache"]["samples"], 120);
}

TEST(Doctor, CudaWithoutAVisibleGpuIsBlocking) {
  DoctorFacts facts = healthy();
  facts.model_device = "cuda";
  const auto problems = diagnose(facts);
  const std::optional<Problem> gpu = find(problems, "gpu", Severity::blocking);
  ASSERT_NE(gpu, std::nullopt);
  EXPECT_NE(gpu->what.find("no GPU is visible (cudaErrorNoDevice"), std::string::npos) << gpu->what;
  EXPECT_NE(gpu->fix.find("model.device: cpu"), std::string::npos);
  EXPECT_TRUE(has_blocking(problems));
}

TEST(Doctor, GpusVisibleToACpuRunIsANote) {
  DoctorFacts facts = healthy();
  facts.gpus.gpus.push_back({0, "NVIDIA H100 80GB HBM3", 85'000'000'000, "0000:3B:00.0", 9, 0});
  facts.torch.cuda_devices = 1;
  const auto problems = diagnose(facts);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].severity, Severity::note);
  EXPECT_EQ(problems[0].fix, "set model.device: cuda to train on them");
  EXPECT_EQ(to_json(facts, problems)["gpu"]["devices"][0]["compute_capability"], "9.0");
}

TEST(Doctor, ACpuOnlyLibtorchWithAGpuIsBlockingForACudaRun) {
  DoctorFacts facts = healthy();
  facts.model_device = "cuda";
  facts.gpus.gpus.push_back({0, "NVIDIA H100", 85'000'000'000, "", 9, 0});
  facts.torch.cuda_devices = 0;
  const std::optional<Problem> gpu = find(diagnose(facts), "gpu", Severity::blocking);
  ASSERT_NE(gpu, std::nullopt);
  EXPECT_NE(gpu->what.find("libtorch 1.13.0 sees none (a CPU-only libtorch)"), std::string::npos) << gpu->what;
}

TEST(Doctor, ATransportThisBuildLacksIsBlocking) {
  DoctorFacts facts = healthy();
  facts.gpus.nccl_compiled = false;
  facts.transport_requested = "nccl";
  const std::optional<Problem> gpu = find(diagnose(facts), "gpu", Severity::blocking);
  ASSERT_NE(gpu, std::nullopt);
  EXPECT_EQ(gpu->what, "roles.transport is nccl but this build has no NCCL");
}

TEST(Doctor, TwoRanksOnOneGpuWithNcclGivesTrainsErrorSplitIntoWhatAndFix) {
  RolePlanRequest request;
  request.hosts = {"n1", "n1"};
  request.gpus_per_node = 1;
  request.transport = "nccl";
  request.model_needs_gpu = true;
  std::string message;
  try {
    plan_roles(request);
  } catch (const ConfigError& error) {
    message = error.what();
  }
  ASSERT_FALSE(message.empty());
  const Problem p = problem_from_config_error(message);
  EXPECT_EQ(p.severity, Severity::blocking);
  EXPECT_EQ(p.area, "config");
  EXPECT_EQ(p.fix, "use roles.transport: cuda_ipc, or one rank per GPU");
  EXPECT_EQ(p.what,
            "roles.transport = nccl but a data rank and the model rank it feeds share a GPU, which NCCL refuses");
}

TEST(Doctor, AConfigErrorWithoutAnInstructionKeepsTheWholeMessage) {
  const Problem p = problem_from_config_error("train.yaml:3: unknown key 'train.batchsize' (did you mean train.batch_size?)");
  EXPECT_EQ(p.what, "train.yaml:3: unknown key 'train.batchsize' (did you mean train.batch_size?)");
  EXPECT_NE(p.fix.find("same error stops `sluice train`"), std::string::npos);
  DoctorFacts facts = healthy();
  facts.config_loaded = false;
  facts.config_error = p.what;
  facts.roles.reset();
  facts.cache = {};
  const auto problems = diagnose(facts);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].severity, Severity::blocking);
  EXPECT_EQ(problems[0].what, p.what);
  // Not "no cache directory given": the directory is in the config that did not load.
  EXPECT_EQ(problems[1].severity, Severity::note);
  EXPECT_EQ(problems[1].what, "the cache was not checked: the config did not load");
}

TEST(Doctor, APlanTrainCannotRunYetIsBlocking) {
  DoctorFacts facts = healthy();
  facts.roles->transport = "cuda_ipc";
  const std::optional<Problem> config = find(diagnose(facts), "config", Severity::blocking);
  ASSERT_NE(config, std::nullopt);
  EXPECT_EQ(config->fix, "use roles.transport: mpi (CPU) for now");
}

TEST(Doctor, CacheProblemsEachSayWhatToRun) {
  DoctorFacts facts = healthy();
  facts.cache.exists = false;
  facts.cache.complete = false;
  const std::optional<Problem> missing = find(diagnose(facts), "cache", Severity::blocking);
  ASSERT_NE(missing, std::nullopt);
  EXPECT_EQ(missing->what, "cache directory /scratch/cache does not exist");
  EXPECT_EQ(missing->fix, "prepare it: sluice prep --corpus CORPUS -o /scratch/cache");

  facts.cache.exists = true;
  const std::optional<Problem> unfinished = find(diagnose(facts), "cache", Severity::blocking);
  ASSERT_NE(unfinished, std::nullopt);
  EXPECT_NE(unfinished->what.find("no manifest.json"), std::string::npos);

  facts.cache.complete = true;
  facts.cache.verify_faults = {"shard-00001.h5 sample LJ001-0002: checksum"};
  const std::optional<Problem> faulty = find(diagnose(facts), "cache", Severity::blocking);
  ASSERT_NE(faulty, std::nullopt);
  EXPECT_EQ(faulty->what, "1 fault(s) in the cache, first: shard-00001.h5 sample LJ001-0002: checksum");

  facts.cache.verify_faults.clear();
  facts.cache.verified = false;
  const auto problems = diagnose(facts);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].severity, Severity::note);
  EXPECT_FALSE(has_blocking(problems));

  facts.cache.dir.clear();
  EXPECT_NE(find(diagnose(facts), "cache", Severity::blocking), std::nullopt);
}

TEST(Doctor, ReadSpeedFromThePageCacheIsNotedOnlyWhenMostlyResident) {
  DoctorFacts facts = healthy();
  facts.cache.read = cache::SequentialRead{4, 14'000'000, 0.01, 1400.0, 0.9};
  const std::optional<Problem> note = find(diagnose(facts), "cache", Severity::note);
  ASSERT_NE(note, std::nullopt);
  EXPECT_EQ(note->what, "90% of the bytes read were already in the page cache: 1400 MB/s is memory speed, not the disk's");
  facts.cache.read->resident_before = 0.1;
  EXPECT_TRUE(diagnose(facts).empty());
}

TEST(Doctor, ThreadsBeyondTheCoresAreAWarningWithTheNumbers) {
  RolePlanRequest request;
  request.hosts = {"n1", "n1", "n1"};  // 1 data rank + 2 model ranks
  const RolePlan plan = plan_roles(request);
  // One compute thread per model rank, 2 readers + 1 sender on the data rank.
  EXPECT_EQ(planned_threads_on_first_node(plan, 2), 5);
  EXPECT_EQ(planned_threads_on_first_node(plan, 4), 7);
  DoctorFacts facts = healthy();
  facts.roles = plan;
  facts.planned_ranks = 3;
  facts.usable_cores = 2;
  const auto problems = diagnose(facts);
  const std::optional<Problem> cpu = find(problems, "cpu", Severity::warning);
  ASSERT_NE(cpu, std::nullopt);
  EXPECT_NE(cpu->what.find("needs at least 5 threads on 2 core(s)"), std::string::npos) << cpu->what;
  EXPECT_NE(cpu->fix.find("train.reader_threads (now 2)"), std::string::npos);
  const std::optional<Problem> mpi = find(problems, "mpi", Severity::note);
  ASSERT_NE(mpi, std::nullopt);
  EXPECT_NE(mpi->fix.find("mpirun --bind-to none -np 3"), std::string::npos);
  EXPECT_FALSE(has_blocking(problems));
}

TEST(Doctor, BindingWarningBecomesWhatAndFix) {
  DoctorFacts facts = healthy();
  facts.binding_warning =
      "this rank is bound to 1 core(s) but runs 4 threads, which then share them; launch with `mpirun --bind-to none`";
  const std::optional<Problem> cpu = find(diagnose(facts), "cpu", Severity::warning);
  ASSERT_NE(cpu, std::nullopt);
  EXPECT_EQ(cpu->what, "this rank is bound to 1 core(s) but runs 4 threads, which then share them");
  EXPECT_EQ(cpu->fix, "launch with `mpirun --bind-to none`");
}

TEST(Doctor, BlockingProblemsComeFirst) {
  DoctorFacts facts = healthy();
  facts.cache.verified = false;  // a note
  facts.model_device = "cuda";   // blocking
  const auto problems = diagnose(facts);
  ASSERT_GE(problems.size(), 2u);
  EXPECT_EQ(problems.front().severity, Severity::blocking);
  EXPECT_EQ(problems.back().severity, Severity::note);
}

TEST(Doctor, LauncherComesFromTheEnvironment) {
  auto launcher = [](std::map<std::string, std::string> env) {
    return launcher_from_env([&](const char* name) -> const char* {
      const auto found = env.find(name);
      return found == env.end() ? nullptr : found->second.c_str();
    });
  };
  EXPECT_EQ(launcher({}), "singleton");
  EXPECT_EQ(launcher({{"PMIX_RANK", "0"}}), "singleton");  // what an Open MPI singleton sets itself
  EXPECT_EQ(launcher({{"OMPI_COMM_WORLD_SIZE", "3"}, {"SLURM_STEP_ID", "0"}}), "mpirun (Open MPI)");
  EXPECT_EQ(launcher({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"PMIX_RANK", "1"}}), "srun");
  EXPECT_EQ(launcher({{"SLURM_JOB_ID", "7"}}), "singleton");  // inside an allocation, not launched by srun
  EXPECT_EQ(launcher({{"PMI_RANK", "0"}}), "mpiexec (Hydra)");
}

TEST(Doctor, TheTableNamesEveryFactAndProblem) {
  DoctorFacts facts = healthy();
  facts.model_device = "cuda";
  facts.hdf5_version = "1.10.8";
  const std::string table = to_table(facts, diagnose(facts));
  EXPECT_NE(table.find("GPUs               none visible (cudaErrorNoDevice"), std::string::npos) << table;
  EXPECT_NE(table.find("HDF5               1.10.8"), std::string::npos) << table;
  EXPECT_NE(table.find("[blocking] gpu: model.device is cuda"), std::string::npos) << table;
  EXPECT_NE(table.find("    fix: run on a GPU node"), std::string::npos) << table;
}

// The max-batch finder measures a GPU; on a machine without one it refuses, saying so.
TEST(MaxBatch, RefusesWithoutACudaDevice) {
  if (model::torch_facts().cuda_devices > 0) GTEST_SKIP() << "a CUDA device is visible";
  model::MaxBatchRequest request;
  request.model.device = "cuda:0";
  try {
    model::find_max_batch(request);
    FAIL() << "no exception";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("needs a CUDA device"), std::string::npos) << error.what();
  }
  request.model.device = "cpu";
  EXPECT_THROW(model::find_max_batch(request), ConfigError);
}

}  // namespace
}  // namespace sluice::runtime
