#include "launcher/train_binary.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "common/log.h"

#ifndef SLUICE_TRAIN_FROM_BINDIR
#error "launcher/CMakeLists.txt defines SLUICE_TRAIN_FROM_BINDIR (the install layout's libexec path from bin/)"
#endif

namespace sluice::launcher {

namespace fs = std::filesystem;

namespace {

// The first argument that is not an option: the command (see needs_torch).
std::string command_of(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (!argument.empty() && argument.front() != '-') return argument;
  }
  return "";
}

}  // namespace

bool needs_torch(int argc, char** argv) {
  const std::string command = command_of(argc, argv);
  return command == "train" || command == "doctor" || command == "bench";
}

std::vector<fs::path> train_binary_candidates(const fs::path& self) {
  const fs::path dir = self.parent_path();
  return {dir / "sluice-train", (dir / SLUICE_TRAIN_FROM_BINDIR).lexically_normal()};
}

int exec_train_binary(int argc, char** argv) {
  // The kernel's path of this executable, links resolved: a link to `sluice` elsewhere still
  // finds sluice-train beside the real file.
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  const std::string command = command_of(argc, argv);
  if (error) {
    log::get("launcher")->error("cannot find this executable (/proc/self/exe: {}), and with it sluice-train, "
                                "which runs `sluice {}`: run sluice-train directly",
                                error.message(), command);
    return 1;
  }
  std::string looked;
  for (const fs::path& candidate : train_binary_candidates(self)) {
    if (::access(candidate.c_str(), X_OK) != 0) {
      looked += (looked.empty() ? "" : ", ") + candidate.string();
      continue;
    }
    // argv stays as given (argv[0] included): the process is still `sluice ...` to ps, pgrep and
    // the user's messages, and mpirun/srun, which know it by pid, see nothing change.
    ::execv(candidate.c_str(), argv);
    log::get("launcher")->error("cannot start {} for `sluice {}`: {}", candidate.string(), command,
                                std::strerror(errno));
    return 1;
  }
  log::get("launcher")->error("`sluice {}` needs libtorch, which is in the executable sluice-train, installed "
                              "beside sluice; it is not at {}. Build the target sluice-train (`cmake --build "
                              "BUILD` builds it with sluice) or reinstall sluice",
                              command, looked);
  return 1;
}

}  // namespace sluice::launcher
