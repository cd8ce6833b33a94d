#pragma once
// The timing side of a `sluice train` or `sluice prep` run, the same for both jobs:
//
//  1. At start (collective): the process's span recorder is set up from runtime.timing*, the
//     calling thread's lane is named "main", debug.delay_* is read, and the clocks are aligned
//     to rank 0's.
//  2. On a failure: this rank writes its timeline with the error and the rank it waited for, so
//     that `sluice report DIR` can say who stopped where after the job is gone.
//  3. At the end (collective): the closing clock estimate, this rank's DIR/timeline/rank-N.json,
//     then rank 0 checks it sees every rank's file (only the sizes travel), has the ones it cannot
//     see sent over (node-local directories; protocol at write_finished in rank_timing.cpp), and
//     writes and prints the report, reading the files one at a time (a report that fails is a
//     warning: the timelines are on disk and `sluice report DIR` retries).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/mpi_session.h"
#include "timing/cpu_watch.h"
#include "timing/injected_delay.h"
#include "timing/timeline_file.h"

namespace sluice::runtime {

class RankTiming {
 public:
  // `identity`: who this rank is (job, rank, host, role, settings); the clock and the injected
  // delay are filled in here.
  RankTiming(const MpiSession& session, const config::Config& config, timing::RankTimeline identity);

  timing::RankTimeline& timeline() { return timeline_; }
  const timing::InjectedDelay& delay() const { return delay_; }

  // Best effort: never throws (the caller is already handling `error`).
  void write_failed(const std::filesystem::path& dir, const std::string& error, int waiting_for,
                    const nlohmann::json& summary) noexcept;
  // `status`: finished | stopped | failed. `tag`: the job's MPI tag for the gather.
  void write_finished(const std::filesystem::path& dir, const std::string& status, const nlohmann::json& summary,
                      int tag);

 private:
  const MpiSession& session_;
  double timeout_s_;
  int pings_;
  timing::InjectedDelay delay_;
  timing::RankTimeline timeline_;
  // Whether this process got the CPU (stopped, starved), with its CPU time and faults: the
  // timeline's `resources` (timing/cpu_watch.h).
  timing::CpuWatch cpu_watch_;

  void take_recording();  // spans, counters and resources into timeline_
  // Rank 0: the ranks whose timeline it cannot see at the size they wrote ("3 17"), "" for none.
  std::string ranks_not_seen(const std::filesystem::path& dir, const std::vector<std::string>& sizes) const;
  // Collective: the `unseen` ranks send their timeline (`mine`) to rank 0, which writes them.
  void collect_unseen(const std::filesystem::path& dir, const std::string& unseen, const std::string& mine, int tag);
};

}  // namespace sluice::runtime
