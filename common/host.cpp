#include "common/host.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

namespace sluice {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  std::string host(name);
  return host.substr(0, host.find('.'));
}

std::optional<int> rank_before_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) {
      try {
        return std::stoi(value);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

int usable_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof(mask), &mask) == 0) return std::max(1, CPU_COUNT(&mask));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string allocator_in_use() {
  // Each exports a function of its own beside malloc; glibc none of these.
  std::string in_use = "system";
  if (::dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr) {
    in_use = "tcmalloc";
  } else if (::dlsym(RTLD_DEFAULT, "mallctl") != nullptr) {
    in_use = "jemalloc";
  } else if (::dlsym(RTLD_DEFAULT, "mi_malloc") != nullptr) {
    in_use = "mimalloc";
  }
  const char* reason = std::getenv("SLUICE_MALLOC_CHOSEN");
  return reason == nullptr || *reason == '\0' ? in_use : in_use + " (" + reason + ")";
}

std::string binding_warning(int threads) {
  const int cores = usable_cores();
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= cores || cores >= machine) return "";
  return "this rank is bound to " + std::to_string(cores) + " core(s) but runs " + std::to_string(threads) +
         " threads, which then share them; launch with `mpirun --bind-to none` (or --map-by slot:PE=" + std::to_string(threads) +
         ", srun --cpus-per-task=" + std::to_string(threads) + ")";
}

}  // namespace sluice
