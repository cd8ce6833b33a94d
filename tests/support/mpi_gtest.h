#pragma once
// The end of main() in an MPI test executable: every rank runs the tests, rank 0 alone prints
// gtest's report, and the exit code is the worst of all ranks' (a failure on any rank fails).
#include <gtest/gtest.h>
#include <mpi.h>

#include "common/mpi_session.h"

namespace sluice::test {

inline int run_all_tests_on_every_rank(const MpiSession& session) {
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, session.world());
  return any_failed;
}

}  // namespace sluice::test
