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

// `sluice doctor` in one paragraph: its --help, and the command list of the `sluice` executable,
// which hands doctor to sluice-train without linking this library (launcher/launch.h).
inline constexpr const char* doctor_summary =
    "Check this machine, MPI launch, config and cache for `sluice train`: GPUs (name, memory, driver, CUDA, "
    "NCCL), MPI library and launcher, HDF5 and libtorch versions, the cache's sequential read speed, the config "
    "and role plan with train's own errors, and every problem found with its fix. Under `mpirun -np N` it "
    "plans for that launch; alone, for --ranks.";

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
