// Clock alignment between real MPI ranks. On one host every rank reads the same CLOCK_MONOTONIC,
// so the true offset is 0: the estimate must be within its own uncertainty of it (plus a little
// for scheduling on an oversubscribed machine), and the drift between two estimates is ~0.
#include <mpi.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "common/mpi_session.h"
#include "timing/clock_sync.h"
#include "tests/support/mpi_gtest.h"

namespace sluice::timing {
namespace {

MpiSession* session = nullptr;

TEST(ClockSync, SameHostOffsetIsZeroWithinTheUncertainty) {
  const ClockEstimate start = estimate_clock_offset(*session, 32, 30.0);
  // Drift is the offsets' difference over the time between the estimates: back to back (about
  // 1 ms), tens of microseconds of scheduling noise on a loaded machine read as a 1% drift.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const ClockEstimate end = estimate_clock_offset(*session, 32, 30.0);
  if (session->rank() == 0) {
    EXPECT_EQ(start.offset_ns, 0);
    EXPECT_EQ(start.uncertainty_ns, 0);
    return;
  }
  EXPECT_GT(start.pings, 25);  // 32 minus the 10% slowest
  EXPECT_GT(start.round_trip_ns, 0);
  EXPECT_LE(std::abs(start.offset_ns), start.uncertainty_ns + 200'000) << start.offset_ns;
  ClockAlignment alignment;
  alignment.start = start;
  finish_alignment(alignment, end);
  EXPECT_LT(std::abs(alignment.drift), 1e-2);
  EXPECT_LE(std::abs(alignment.to_reference(end.local_ns) - end.local_ns), end.uncertainty_ns + 200'000);
}

}  // namespace
}  // namespace sluice::timing

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::timing::session = s; });
}
