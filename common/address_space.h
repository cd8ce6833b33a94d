#pragma once
// The address-space limit (`ulimit -v`, RLIMIT_AS) a process runs under, checked before the work
// starts. Below what a job needs, the libraries sluice runs on do not fail cleanly when the kernel
// refuses an allocation: measured here, libhdf5 (H5AC_create) and libsoxr dereference a null
// pointer, OpenBLAS's and tcmalloc's allocators retry mmap forever (a rank that spins, heartbeat
// alive, no step), glibc's malloc ends in std::bad_alloc on a thread that cannot throw. So a
// limit known to be too small is refused up front, with the numbers, as the machine's refusal
// (EnvironmentError, exit 5); Slurm's --mem (a cgroup on resident memory) is not affected.
#include <cstdint>
#include <optional>
#include <string>

namespace sluice {

constexpr uint64_t megabytes = uint64_t{1} << 20;

// The soft RLIMIT_AS in bytes; nullopt when unlimited.
std::optional<uint64_t> address_space_limit();

// What a job needs: `bytes` of address space, `who` ("prep with 4 thread(s)") and `lower`, the
// settings that lower the need ("prep.threads").
struct AddressSpaceNeed {
  uint64_t bytes = 0;
  std::string who;
  std::string lower;
};

// Throws EnvironmentError when the limit is below the need: the limit, the need, why, what to do.
void require_address_space(const AddressSpaceNeed& need);

}  // namespace sluice
