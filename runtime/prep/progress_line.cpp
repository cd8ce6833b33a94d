#include "runtime/prep/progress_line.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "common/log.h"

namespace sluice::runtime {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  } else if (total >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", total / 60, total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%llds", total);
  }
  return text;
}

ProgressLine::ProgressLine(std::string label, double log_every_s)
    : label_(std::move(label)), log_every_s_(log_every_s), terminal_(::isatty(STDERR_FILENO) != 0),
      started_(std::chrono::steady_clock::now()), last_log_(started_) {}

std::string ProgressLine::render(const std::string& label, const ProgressCounts& counts,
                                 double elapsed_s) {
  const double fraction = counts.total_audio_seconds > 0
                              ? counts.audio_seconds / counts.total_audio_seconds
                              : (counts.total_items > 0 ? double(counts.items) / double(counts.total_items) : 0);
  const double rate = elapsed_s > 0 ? counts.audio_seconds / elapsed_s : 0;
  const double eta = rate > 0 ? (counts.total_audio_seconds - counts.audio_seconds) / rate : NAN;
  char text[256];
  std::snprintf(text, sizeof(text),
                "%s: %lld/%lld clips (%.1f%%), %.2f/%.2f h audio, %.0f audio-s/s, ETA %s, %lld rejects",
                label.c_str(), static_cast<long long>(counts.items),
                static_cast<long long>(counts.total_items), 100.0 * fraction,
                counts.audio_seconds / 3600.0, counts.total_audio_seconds / 3600.0, rate,
                format_duration(eta).c_str(), static_cast<long long>(counts.rejects));
  return text;
}

void ProgressLine::update(const ProgressCounts& counts) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", render(label_, counts, elapsed).c_str());
    std::fflush(stderr);
    printed_ = true;
  } else if (std::chrono::duration<double>(now - last_log_).count() >= log_every_s_) {
    log::get("runtime")->info("{}", render(label_, counts, elapsed));
    last_log_ = now;
  }
}

void ProgressLine::finish() {
  if (terminal_ && printed_) std::fprintf(stderr, "\n");
  printed_ = false;
}

}  // namespace sluice::runtime
