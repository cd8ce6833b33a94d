#include "common/address_space.h"

#include <sys/resource.h>

#include <spdlog/fmt/fmt.h>

#include "common/error.h"

namespace sluice {

std::optional<uint64_t> address_space_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(limit.rlim_cur);
}

void require_address_space(const AddressSpaceNeed& need) {
  const std::optional<uint64_t> limit = address_space_limit();
  if (!limit || *limit >= need.bytes) return;
  throw EnvironmentError(fmt::format(
      "the address-space limit (ulimit -v) is {} MB, below the {} MB that {} needs here: under it, libraries "
      "sluice uses (HDF5, libsoxr, OpenBLAS, tcmalloc) crash or spin instead of failing when an allocation is "
      "refused. Raise or remove `ulimit -v` for the job (Slurm's --mem limits resident memory and needs no "
      "ulimit -v), or lower {}",
      *limit / megabytes, (need.bytes + megabytes - 1) / megabytes, need.who, need.lower));
}

}  // namespace sluice
