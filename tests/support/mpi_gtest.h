#pragma once
// The end of main() in an MPI test executable: every rank runs the tests; rank 0 prints gtest's
// report, the other ranks print only their own failures (to stderr, tagged with the rank); the
// exit code is the worst rank's, agreed with a deadline (a rank stuck in its tests aborts the job
// rather than leaving the others waiting).
#include <chrono>
#include <cstdio>
#include <functional>

#include <gtest/gtest.h>
#include <mpi.h>

#include "common/mpi_session.h"

namespace sluice::test {

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

inline int run_all_tests_on_every_rank(const MpiSession& session, double deadline_s = 60.0) {
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  int worst = failed;
  MPI_Request request;
  check_mpi(MPI_Iallreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, session.world(), &request),
            "MPI_Iallreduce(test results)");
  const Deadline deadline = deadline_after(deadline_s);
  for (int done = 0; !done;) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(test results)");
    if (!done && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "[rank %d] another rank did not finish its tests within %.0f s\n", session.rank(),
                   deadline_s);
      session.abort(1);
    }
  }
  return worst;
}

// The whole main() of an MPI test executable: one MpiSession, as in production, handed to the
// tests through `publish`; gtest's listing (gtest_discover_tests) and progress come from rank 0
// alone, the other ranks print only their own failures (to stderr, tagged with the rank).
inline int mpi_test_main(int argc, char** argv, const std::function<void(MpiSession*)>& publish) {
  MpiSession session(&argc, &argv);
  publish(&session);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
  return run_all_tests_on_every_rank(session);
}

}  // namespace sluice::test
