// The suite every gradient reducer passes (tests/model/gradient_reducer_suite.h), for the MPI
// reducer of CPU model ranks, under mpirun with 2 and with 3 ranks: every rank is a model rank.
#include <cstdio>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/mpi_session.h"
#include "gradient_reducer_suite.h"
#include "runtime/train/mpi_gradient_reducer.h"
#include "tests/support/mpi_gtest.h"

namespace sluice::runtime {
namespace {

MpiSession* session = nullptr;

using model::testing::GradientReducerSuite;

constexpr int barrier_tag = 0x3e00;  // this test's own tags; the reducer's collectives use none

class MpiReducerHarness : public model::testing::ReducerHarness {
 public:
  std::unique_ptr<model::GradientReducer> make(double timeout_s) override {
    // As the train job does: a collective cannot tell which member is late, so every other
    // rank is named.
    std::string others;
    for (int r = 0; r < session->size(); ++r) {
      if (r != session->rank()) others += (others.empty() ? "" : ", ") + session->describe(r);
    }
    return std::make_unique<MpiGradientReducer>(session->world(), timeout_s, others);
  }
  bool ranks_are_processes() const override { return true; }
  std::string silent_peer_skip_reason() const override {
    return session->size() < 2 ? "needs two or more ranks (mpirun -np 2)" : "";
  }
  std::string describe(int rank) const override { return session->describe(rank); }
  void barrier() override {
    gather_strings(*session, "", barrier_tag, 30, "the reducer test's barrier");
    broadcast_string(*session, "", barrier_tag + 1, 30, "the reducer test's barrier");
  }
};

INSTANTIATE_TEST_SUITE_P(Mpi, GradientReducerSuite,
                         ::testing::Values(model::testing::ReducerImplementation{
                             "mpi", [] { return std::make_unique<MpiReducerHarness>(); }}),
                         model::testing::implementation_name);

}  // namespace
}  // namespace sluice::runtime

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::runtime::session = s; });
}
