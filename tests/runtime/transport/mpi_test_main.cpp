// main() of the MPI test executables (run under mpirun -np 2): one MpiSession, as in production;
// rank 0 prints gtest's output, other ranks print only their own failures (to stderr, tagged
// with the rank); the exit code is the worst of all ranks'.
#include <cstdio>

#include <gtest/gtest.h>

#include "common/mpi_session.h"
#include "mpi_harness.h"
#include "tests/support/mpi_gtest.h"

int main(int argc, char** argv) {
  sluice::MpiSession session(&argc, &argv);
  sluice::transport::testing::set_test_session(&session);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.rank() != 0) {
    // Test listings (gtest_discover_tests) and progress come from rank 0 alone.
    if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
  }
  return sluice::test::run_all_tests_on_every_rank(session);
}
