#include "runtime/rank_timing.h"

#include <cstdio>

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
  timeline_.resources = cpu_watch_.to_json(snapshot.lane_threads);
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

void RankTiming::write_finished(const fs::path& dir, const std::string& status, const nlohmann::json& summary,
                                int tag) {
  auto& recorder = timing::SpanRecorder::global();
  timing::finish_alignment(timeline_.clock, timing::estimate_clock_offset(session_, pings_, timeout_s_));
  timeline_.status = status;
  timeline_.summary = summary;
  take_recording();
  const std::string mine = timeline_.to_json().dump();
  // The timelines only explain the run: a disk too full for them (the job's own outputs are
  // already written) is a warning, and the exchange below still happens, so no rank waits for one
  // that failed here.
  const auto write_or_warn = [&](const fs::path& path, auto&& write) {
    try {
      write();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("the timeline {} could not be written ({}); `sluice report` will lack it",
                                path.string(), error.what());
    }
  };
  write_or_warn(timing::timeline_path(dir, session_.rank()), [&] { timing::write_timeline(dir, timeline_); });
  const auto all = gather_strings(session_, mine, tag, timeout_s_, "the ranks' timelines");
  if (session_.rank() != 0) return;
  for (int r = 1; r < session_.size(); ++r) {
    const fs::path path = timing::timeline_path(dir, r);
    if (!fs::exists(path)) {
      write_or_warn(path, [&] { write_file_atomically(path, all[static_cast<size_t>(r)] + "\n"); });
    }
  }
  if (!recorder.enabled()) return;
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

}  // namespace sluice::runtime
