#pragma once
// The one test suite every GradientReducer passes (model/gradient_reducer.h has the protocol).
// An implementation joins by providing a ReducerHarness and instantiating GradientReducerSuite:
//   loopback  tests/model/loopback_reducer_test.cpp            (one process standing in for 3 ranks)
//   mpi       tests/runtime/test_mpi_gradient_reducer.cpp      (mpirun -np 2 and -np 3, label mpi)
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "model/gradient_reducer.h"

namespace sluice::model::testing {

class ReducerHarness {
 public:
  virtual ~ReducerHarness() = default;
  // A reducer among all the ranks of the test whose waits give up after `timeout_s`.
  virtual std::unique_ptr<GradientReducer> make(double timeout_s) = 0;
  // True when every rank is its own process with its own gradients (each rank then contributes
  // other values); false when one process stands in for ranks that all hold the same gradients.
  virtual bool ranks_are_processes() const = 0;
  // Why a peer cannot be silent here (one process has no peer), or empty.
  virtual std::string silent_peer_skip_reason() const { return ""; }
  // How `rank` is named in errors ("rank 2 (host node07)").
  virtual std::string describe(int rank) const { return "rank " + std::to_string(rank); }
  // Meets every other rank, with a deadline (nothing to meet in one process).
  virtual void barrier() {}
};

struct ReducerImplementation {
  std::string name;
  std::function<std::unique_ptr<ReducerHarness>()> make;
};

// gtest prints a parameter with this (instead of its bytes).
inline void PrintTo(const ReducerImplementation& implementation, std::ostream* out) { *out << implementation.name; }

inline std::string implementation_name(const ::testing::TestParamInfo<ReducerImplementation>& info) {
  return info.param.name;
}

class GradientReducerSuite : public ::testing::TestWithParam<ReducerImplementation> {
 protected:
  void SetUp() override { harness_ = GetParam().make(); }

  std::unique_ptr<ReducerHarness> harness_;
};

}  // namespace sluice::model::testing
