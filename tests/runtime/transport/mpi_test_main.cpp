// main() of the MPI test executables (run under mpirun -np 2): one MpiSession, as in production;
// rank 0 prints gtest's output, other ranks print only their own failures (to stderr, tagged
// with the rank); the exit code is the worst of all ranks'.
#include <cstdio>

#include <gtest/gtest.h>

#include "common/mpi_session.h"
#include "mpi_harness.h"
#include "tests/support/mpi_gtest.h"

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::transport::testing::set_test_session(s); });
}
