#pragma once
// The start-up agreement of `sluice train` between its two kinds of rank: sluice processes
// (`sluice train`, launcher/) and Python model ranks (a training script's sluice.Feed(), python/
// and docs/python.md), launched together as one MPI job (mpirun's MPMD form, srun --multi-prog).
//
// Protocol (collective over the world; every rank makes it first in run_train, before it reads
// a setting, so that both kinds make the same collectives in the same order):
//  1. MPI_Allgather of every rank's announcement: its kind, whether it asked for --resume (a
//     sluice rank), the global step its script resumes from (a Python rank; -1: the start) and
//     whether the script gave a config of its own.
//  2. Only when a Python rank takes part: rank 0 must be a sluice rank (in a job of two or more);
//     it broadcasts its effective config (MPI_Bcast of YAML) and every rank runs with it. A
//     Python rank whose script gave its own config compares the two; the ranks agree
//     (MPI_Allreduce MIN) on the first rank that found a difference, that rank broadcasts its
//     message, and every rank throws the same ConfigError: no rank is left waiting and none
//     has to end the job.
//  3. The resume: the Python ranks' resume steps must be equal; --resume (sluice's own
//     checkpoints) cannot be combined with Python model ranks, which checkpoint themselves.
// Every check is made on every rank from the same gathered facts, so an error is the same
// ConfigError everywhere.
#include <cstdint>
#include <vector>

#include "common/config.h"
#include "common/mpi_session.h"

namespace sluice::runtime {

enum class RankKind : int32_t { sluice = 0, python = 1 };

struct RankAnnouncement {
  RankKind kind = RankKind::sluice;
  bool resume = false;        // sluice: --resume
  int64_t resume_step = -1;   // python: sluice.Feed(resume_step=N); -1: from the start
  bool own_config = false;    // python: the script gave sluice.Feed(config=..., overrides=...)
};

struct JobAgreement {
  std::vector<RankKind> kinds;  // index = rank
  int64_t resume_step = -1;     // the Python ranks' agreed resume step; -1: none

  bool is_python(int rank) const { return kinds.at(static_cast<size_t>(rank)) == RankKind::python; }
  std::vector<int> python_ranks() const;
};

// Steps 1-3 above. `config`: this rank's (a sluice rank's effective config; a Python rank's own
// or the defaults); replaced by rank 0's when Python ranks take part. Throws ConfigError.
JobAgreement agree_on_job(const MpiSession& session, const RankAnnouncement& mine, config::Config& config);

// The settings two configs disagree on, "key: A here, B on rank 0" joined by "; " ("" if none).
std::string config_differences(const config::Config& here, const config::Config& rank0);

}  // namespace sluice::runtime
