#pragma once
// The one live progress line rank 0 prints for long jobs: on a terminal it rewrites itself in
// place; in a log file (not a terminal) it is a plain log line at most every `log_every_s`.
#include <chrono>
#include <string>

namespace sluice::runtime {

struct ProgressCounts {
  int64_t items = 0;
  int64_t total_items = 0;
  double audio_seconds = 0;
  double total_audio_seconds = 0;
  int64_t rejects = 0;
};

class ProgressLine {
 public:
  explicit ProgressLine(std::string label, double log_every_s = 30.0);
  // Prints when due (always on a terminal, else every log_every_s).
  void update(const ProgressCounts& counts);
  // Ends the in-place line so that following output starts on a new line.
  void finish();

  static std::string render(const std::string& label, const ProgressCounts& counts,
                            double elapsed_s);

 private:
  std::string label_;
  double log_every_s_;
  bool terminal_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_log_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace sluice::runtime
