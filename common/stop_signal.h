#pragma once
// Preemption: SIGTERM (what Slurm sends before killing a job, and what `scancel` and mpirun
// forward) and SIGUSR1 (a common `sbatch --signal=B:USR1@120` choice) ask the run to stop at the
// next safe point. The handler only sets a flag; the run polls it.
namespace sluice {

void install_stop_signal_handlers();

// True once SIGTERM or SIGUSR1 arrived.
bool stop_requested();

// "SIGTERM" or "SIGUSR1": the signal that asked, for messages.
const char* stop_signal_name();

}  // namespace sluice
