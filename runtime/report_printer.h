#pragma once
// Rank 0's last act of a train or prep run: write the bottleneck report next to the run's
// timelines and print its verdict lines. A report that cannot be written is a warning, never a
// failed run: the timelines are on disk and `sluice report DIR` retries offline.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "common/log.h"

namespace sluice::runtime {

template <typename WriteReport>
void print_report(const std::filesystem::path& dir, WriteReport write_report) {
  try {
    const std::string verdicts = write_report(dir);
    // The verdict lines end with where the report was written.
    std::printf("%s%s", verdicts.c_str(), verdicts.empty() || verdicts.back() == '\n' ? "" : "\n");
    std::fflush(stdout);
  } catch (const std::exception& error) {
    log::get("runtime")->warn("the report could not be written ({}); the timelines are kept: run `sluice report {}`",
                              error.what(), dir.string());
  }
}

}  // namespace sluice::runtime
