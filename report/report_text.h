#pragma once
// How the report writes numbers in text: one place for the rules' summaries and the writers of
// report.md and report.html, so that a share or a rate reads the same everywhere.
#include <string>
#include <vector>

#include "timing/stage.h"

namespace sluice::report {

std::string percent(double fraction);       // "12.3%"
std::string milliseconds(double seconds);   // "12.3" (the unit is in the column's heading)
std::string stage_name(timing::Stage stage);  // "cache_read"
std::string rank_list(const std::vector<int>& ranks);  // "1, 2, 3"; "none" when empty

// "12.3 MB/s" ("n/a" for 0), "4.5 MB": how the report writes rates and sizes.
std::string bandwidth_text(double bytes_per_s);
std::string bytes_text(double bytes);

}  // namespace sluice::report
