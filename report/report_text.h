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
// "1, 2, 3"; "none" when empty; bounded as named_list (a hang's waiters at 4,096 ranks).
std::string rank_list(const std::vector<int>& ranks);

// The most names a verdict's text gives: the report at 4,096 ranks must still fit a screen.
inline constexpr size_t named_at_most = 10;

// A name and how much it matters to the rule that lists it (a host's exposed wait per step).
struct NamedItem {
  std::string name;
  double weight = 0;
};

// Every rule that lists ranks or hosts writes them through this: up to `limit` items joined
// with ", " in the order given; beyond that the `limit` heaviest (ties in the order given),
// heaviest first, then "and N more". So a small run's text is unchanged and a large run's names
// the ones that matter and counts the rest; report.json keeps the full list.
std::string named_list(std::vector<NamedItem> items, size_t limit = named_at_most);

// "12.3 MB/s" ("n/a" for 0), "4.5 MB": how the report writes rates and sizes.
std::string bandwidth_text(double bytes_per_s);
std::string bytes_text(double bytes);

}  // namespace sluice::report
