#pragma once
// Facts about the machine this process runs on.
#include <optional>
#include <string>

namespace sluice {

// This machine's short host name (up to the first dot).
std::string host_name();

// This process's rank as its launcher set it before MPI starts (mpirun's OMPI_COMM_WORLD_RANK,
// PMIx's, PMI's, srun's SLURM_PROCID); nullopt when started alone.
std::optional<int> rank_before_mpi();

// Cores this process may run on: its CPU affinity mask (what mpirun or srun binding left it),
// not the machine's total. At least 1.
int usable_cores();

// A warning for a rank that will run `threads` working threads on fewer cores than that because of
// its binding, or "" when the binding leaves room. Says how to launch instead.
std::string binding_warning(int threads);

// The C allocator this process runs with: "tcmalloc" when it is loaded (sluice preloads it into
// sluice-train: launcher/train_binary.h), "jemalloc" or "mimalloc" when the user preloaded one,
// else "system". With the launcher's reason when it set
// one (SLUICE_MALLOC_CHOSEN), e.g. "tcmalloc (/usr/lib/...so.4, preloaded by sluice; ...)".
std::string allocator_in_use();

}  // namespace sluice
