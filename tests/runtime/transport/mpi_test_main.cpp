// main() of the MPI test executables (run under mpirun -np 2): one MpiSession, as in production;
// rank 0 prints gtest's output, other ranks print only their own failures (to stderr, tagged
// with the rank); the exit code is the worst of all ranks'.
#include <cstdio>

#include <gtest/gtest.h>

#include "common/mpi_session.h"
#include "mpi_harness.h"

namespace {

class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  sluice::MpiSession session(&argc, &argv);
  sluice::transport::testing::set_test_session(&session);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.rank() != 0) {
    // Test listings (gtest_discover_tests) and progress come from rank 0 alone.
    if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session.rank()));
  }
  int failed = RUN_ALL_TESTS();
  // The job's verdict is the worst rank's; Iallreduce with a deadline, since the other rank may
  // be stuck (then nobody may wait on it: abort the job).
  int worst = failed;
  MPI_Request request;
  MPI_Iallreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, session.world(), &request);
  const sluice::Deadline deadline = sluice::deadline_after(60.0);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "[rank %d] the other rank did not finish its tests within 60 s\n", session.rank());
      session.abort(1);
    }
  }
  return worst;
}
