#include "launcher/train_binary.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "common/address_space.h"
#include "common/error.h"
#include "common/host.h"
#include "common/log.h"

#ifndef SLUICE_TRAIN_FROM_BINDIR
#error "launcher/CMakeLists.txt defines SLUICE_TRAIN_FROM_BINDIR (the install layout's libexec path from bin/)"
#endif
#ifndef SLUICE_TCMALLOC_PATH
#error "launcher/CMakeLists.txt defines SLUICE_TCMALLOC_PATH (empty where the build found no tcmalloc)"
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

// What SLUICE_MALLOC asks for (train_binary.h): the library to preload (empty: none) and the
// reason, which sluice-train prints after the allocator it finds loaded ("tcmalloc (REASON)").
struct AllocatorChoice {
  std::string preload;
  std::string reason;
};

// Throws std::invalid_argument for an unknown SLUICE_MALLOC, naming the accepted values.
AllocatorChoice choose_allocator(const char* requested, const char* ld_preload, const std::string& tcmalloc_path) {
  const std::string asked = requested == nullptr || *requested == '\0' ? "tcmalloc" : requested;
  if (asked != "tcmalloc" && asked != "system") {
    throw std::invalid_argument("SLUICE_MALLOC=" + asked + " is not an allocator sluice knows: use tcmalloc (the "
                                "default) or system (the C library's malloc)");
  }
  if (asked == "system") return {"", "SLUICE_MALLOC=system: the C library's malloc"};
  const std::string preloaded = ld_preload == nullptr ? "" : ld_preload;
  for (const char* other : {"tcmalloc", "jemalloc", "mimalloc"}) {
    if (preloaded.find(other) != std::string::npos) {
      return {"", "LD_PRELOAD already names " + std::string(other) + " (" + preloaded + "): left as it is"};
    }
  }
  if (tcmalloc_path.empty() || ::access(tcmalloc_path.c_str(), R_OK) != 0) {
    return {"", "tcmalloc is not installed (" +
                    (tcmalloc_path.empty() ? std::string("not found at build time") : tcmalloc_path) +
                    "): the C library's malloc; install libtcmalloc-minimal4 for flat memory on CPU ranks"};
  }
  return {tcmalloc_path, tcmalloc_path + ", preloaded by sluice; SLUICE_MALLOC=system for glibc's"};
}

// What a training process needs of address space (common/address_space.h): libtorch's and its
// libraries' mappings, then OpenBLAS's 128 MB buffer per thread it starts (one per core). Measured
// on the sample corpus, one process, 2 cores: VmPeak 1,491 MB with tcmalloc, 1,927 MB with glibc's
// malloc; under `ulimit -v` 1.2 GB it spun in OpenBLAS's mmap retries, under 1.8 GB glibc's
// malloc crashed it. 2 GB + 128 MB a core (2.25 GB here) leaves that room.
AddressSpaceNeed train_address_space_need() {
  const uint64_t cores = static_cast<uint64_t>(usable_cores());
  return {2048 * megabytes + 128 * megabytes * cores,
          "a training process on " + std::to_string(cores) + " core(s)",
          "the cores each rank may use (its CPU binding: mpirun --bind-to, srun --cpus-per-task)"};
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
  if (command == "train") {
    try {
      require_address_space(train_address_space_need());
    } catch (const EnvironmentError& refused) {
      // Every rank of a job meets the same limit: rank 0 says it, all end with its code. The others
      // leave a second later: mpirun ends the job at the first non-zero exit, which must not cut
      // rank 0 off before it has said why.
      if (rank_before_mpi().value_or(0) == 0) {
        log::get("launcher")->error("{}: {}", to_string(refused.kind()), refused.what());
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      return 5;  // the exit-code contract's "the machine refused" (launch.cpp, docs/operations.md)
    }
  }
  AllocatorChoice allocator;
  try {
    allocator = choose_allocator(std::getenv("SLUICE_MALLOC"), std::getenv("LD_PRELOAD"), SLUICE_TCMALLOC_PATH);
  } catch (const std::invalid_argument& bad) {
    log::get("launcher")->error("{}", bad.what());
    return 2;
  }
  log::get("launcher")->debug("allocator: {}", allocator.reason);
  if (!allocator.preload.empty()) {
    const char* before = std::getenv("LD_PRELOAD");
    const std::string preload = allocator.preload + (before != nullptr && *before != '\0' ? ":" + std::string(before) : "");
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    // tcmalloc reports every allocation over 1 GiB on stderr by default; a large batch or index
    // is not news.
    ::setenv("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", "1099511627776", 0);
  }
  // sluice-train says which allocator it runs with (doctor, the train log).
  ::setenv("SLUICE_MALLOC_CHOSEN", allocator.reason.c_str(), 1);
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
