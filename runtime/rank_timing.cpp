#include "runtime/rank_timing.h"

#include <cstdio>
#include <sstream>

#include "common/file_util.h"
#include "common/log.h"
#include "report/write_report.h"
#include "timing/clock_sync.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

namespace fs = std::filesystem;

RankTiming::RankTiming(const MpiSession& session, const config::Config& config, timing::RankTimeline identity)
    : session_(session),
      timeout_s_(config.number("runtime.timeout_s")),
      pings_(static_cast<int>(config.integer("runtime.clock_pings"))),
      delay_(timing::InjectedDelay::parse(config.string("debug.delay_stage"), config.string("debug.delay_ranks"),
                                          config.number("debug.delay_ms"), config.integer("debug.delay_every"))),
      timeline_(std::move(identity)) {
  auto& recorder = timing::SpanRecorder::global();
  recorder.set_enabled(config.boolean("runtime.timing"));
  recorder.set_capacity(static_cast<size_t>(config.integer("runtime.timing_capacity")));
  recorder.name_this_thread("main");
  timeline_.injected_delay = delay_.to_json();
  timeline_.clock.start = timing::estimate_clock_offset(session_, pings_, timeout_s_);
}

void RankTiming::take_recording() {
  auto snapshot = timing::SpanRecorder::global().snapshot();
  timeline_.set_resources(cpu_watch_.to_json(snapshot.lane_threads));
  timeline_.take(std::move(snapshot));
}

void RankTiming::write_failed(const fs::path& dir, const std::string& error, int waiting_for,
                              const nlohmann::json& summary) noexcept {
  try {
    timeline_.status = "failed";
    timeline_.error = error;
    timeline_.waiting_for = waiting_for;
    timeline_.summary = summary;
    take_recording();
    timing::write_timeline(dir, timeline_);
  } catch (const std::exception& write_error) {
    log::get("runtime")->warn("could not write this rank's timeline after the failure: {}", write_error.what());
  }
}

// THE END-OF-RUN PROTOCOL (collective, every message on `tag`; between a pair of ranks MPI
// keeps the order, so the three rounds cannot be confused):
//  1. every rank writes its own RUN_DIR/timeline/rank-N.json and sends rank 0 one number, the
//     size it wrote (-1 when the write failed);
//  2. rank 0 checks each file on its own view of RUN_DIR (same size) and broadcasts the ranks it
//     cannot see, "" when it sees all: the run directory is not shared (node-local disks);
//  3. those ranks send their timeline to rank 0, which takes them one at a time and writes each.
// So on a shared file system (the usual cluster) rank 0's memory and time grow with the ranks only
// by one number and one stat() each, and without one by one timeline at a time.
void RankTiming::write_finished(const fs::path& dir, const std::string& status, const nlohmann::json& summary,
                                int tag) {
  auto& recorder = timing::SpanRecorder::global();
  timing::finish_alignment(timeline_.clock, timing::estimate_clock_offset(session_, pings_, timeout_s_));
  timeline_.status = status;
  timeline_.summary = summary;
  take_recording();
  const std::string mine = timeline_.to_json().dump() + "\n";
  int64_t written = -1;
  try {
    fs::create_directories(dir / "timeline");
    write_file_atomically(timing::timeline_path(dir, session_.rank()), mine);
    written = static_cast<int64_t>(mine.size());
  } catch (const std::exception& error) {
    log::get("runtime")->warn("could not write this rank's timeline ({}); sending it to rank 0", error.what());
  }
  const auto sizes = gather_strings(session_, std::to_string(written), tag, timeout_s_, "the ranks' timeline sizes");
  const std::string unseen = broadcast_string(session_, session_.rank() == 0 ? ranks_not_seen(dir, sizes) : "", tag,
                                              timeout_s_, "the timelines rank 0 cannot see");
  collect_unseen(dir, unseen, mine, tag);
  if (session_.rank() != 0 || !recorder.enabled()) return;
  try {
    // The verdict lines end with where the report was written.
    const std::string verdicts = report::write_report(dir);
    std::printf("%s%s", verdicts.c_str(), verdicts.empty() || verdicts.back() == '\n' ? "" : "\n");
    std::fflush(stdout);
  } catch (const std::exception& error) {
    log::get("runtime")->warn("the report could not be written ({}); the timelines are kept: run `sluice report {}`",
                              error.what(), dir.string());
  }
}

std::string RankTiming::ranks_not_seen(const fs::path& dir, const std::vector<std::string>& sizes) const {
  std::string unseen;
  for (int r = 1; r < session_.size(); ++r) {
    std::error_code error;
    const auto size = fs::file_size(timing::timeline_path(dir, r), error);
    if (error || std::to_string(size) != sizes[static_cast<size_t>(r)]) {
      unseen += (unseen.empty() ? "" : " ") + std::to_string(r);
    }
  }
  if (!unseen.empty()) {
    log::get("runtime")->info("rank 0 does not see the timelines of ranks {} in {} (a run directory not on a shared "
                              "file system?): they send them", unseen, dir.string());
  }
  return unseen;
}

void RankTiming::collect_unseen(const fs::path& dir, const std::string& unseen, const std::string& mine, int tag) {
  std::istringstream ranks(unseen);
  int place = 0;  // rank 0 takes them in order: the n-th sender may wait n deadlines
  for (int r; ranks >> r; ++place) {
    if (session_.rank() == r) {
      send_string(session_, 0, tag, mine, deadline_after(timeout_s_ * (place + 1)), "this rank's timeline");
    }
    if (session_.rank() != 0) continue;
    // One at a time: rank 0 holds one timeline, however many ranks send.
    const std::string timeline = receive_string(session_, r, tag, deadline_after(timeout_s_), "its timeline");
    // The timelines only explain the run: a disk too full for them (the job's own outputs are
    // already written) is a warning, and the other senders are still taken, so none waits.
    try {
      fs::create_directories(dir / "timeline");
      write_file_atomically(timing::timeline_path(dir, r), timeline);
    } catch (const std::exception& error) {
      log::get("runtime")->warn("the timeline of rank {} could not be written ({}); `sluice report` will lack it", r,
                                error.what());
    }
  }
}

}  // namespace sluice::runtime
