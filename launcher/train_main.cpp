// sluice-train: the executable with libtorch. It runs every command; `sluice` starts it for train,
// doctor and bench (launch.h says why the two are apart). This file adds those three commands
// (commands/) to the shared command line.
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>

#include "commands/bench_command.h"
#include "commands/doctor_command.h"
#include "commands/train_command.h"
#include "common/mpi_session.h"
#include "launcher/launch.h"

namespace {

class CommandsWithTorch : public sluice::launcher::TorchCommands {
 public:
  void add(CLI::App& app) override {
    train_.add(app);
    doctor_ = std::make_unique<sluice::DoctorCommand>(app);
    bench_ = std::make_unique<sluice::BenchCommand>(app);
  }

  std::optional<int> run_without_mpi() override { return bench_->run_without_mpi(); }

  double join_timeout_s() const override {
    // doctor and bench wait at MPI's start as train does, but read no config before it.
    return train_.chosen() ? train_.join_timeout_s() : sluice::ConfigOptions().timeout_s();
  }

  std::optional<int> run_with_mpi(sluice::MpiSession& session, double& abort_grace_s) override {
    if (const auto code = doctor_->run(session)) return *code;
    if (const auto code = bench_->run_with_mpi(session)) return *code;
    if (train_.chosen()) return train_.run(session, abort_grace_s);
    return std::nullopt;
  }

 private:
  sluice::TrainCommand train_;
  std::unique_ptr<sluice::DoctorCommand> doctor_;
  std::unique_ptr<sluice::BenchCommand> bench_;
};

}  // namespace

int main(int argc, char** argv) {
  CommandsWithTorch commands;
  return sluice::launcher::launch(argc, argv, &commands);
}
