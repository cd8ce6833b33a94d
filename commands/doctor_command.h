#pragma once
// The command line of `sluice doctor`, kept out of main.cpp: main adds it to its CLI::App and
// asks it to run; the checks themselves are in commands/doctor.h.
#include <memory>
#include <optional>

namespace CLI {
class App;
}

namespace sluice {
class MpiSession;

class DoctorCommand {
 public:
  // Adds `doctor` and its options to `app`.
  explicit DoctorCommand(CLI::App& app);
  ~DoctorCommand();
  DoctorCommand(const DoctorCommand&) = delete;
  DoctorCommand& operator=(const DoctorCommand&) = delete;

  // After parsing: doctor's exit code when it was chosen, else nullopt. Doctor plans for this
  // launch, hence the MPI session.
  std::optional<int> run(MpiSession& session);

 private:
  struct Options;
  std::unique_ptr<Options> options_;
};

}  // namespace sluice
