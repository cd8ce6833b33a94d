#include "report/report_text.h"

#include <algorithm>

#include <spdlog/fmt/fmt.h>

namespace sluice::report {

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string milliseconds(double seconds) { return fmt::format("{:.1f}", 1000 * seconds); }

std::string stage_name(timing::Stage stage) { return std::string(timing::to_string(stage)); }

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  std::vector<NamedItem> items;
  items.reserve(ranks.size());
  for (int r : ranks) items.push_back({std::to_string(r), 0});
  return named_list(std::move(items));
}

std::string named_list(std::vector<NamedItem> items, size_t limit) {
  const size_t more = items.size() > limit ? items.size() - limit : 0;
  if (more > 0) {
    std::stable_sort(items.begin(), items.end(), [](const NamedItem& a, const NamedItem& b) { return a.weight > b.weight; });
    items.resize(limit);
  }
  std::string list;
  for (const auto& item : items) list += (list.empty() ? "" : ", ") + item.name;
  if (more > 0) list += fmt::format(" and {} more", more);
  return list;
}

std::string bandwidth_text(double bytes_per_s) {
  if (bytes_per_s <= 0) return "n/a";
  if (bytes_per_s >= 1e9) return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9);
  if (bytes_per_s < 1e6) return fmt::format("{:.0f} kB/s", bytes_per_s / 1e3);  // a throttled disk, a slow link
  return fmt::format("{:.1f} MB/s", bytes_per_s / 1e6);
}

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.0f} kB", bytes / 1e3);
}

}  // namespace sluice::report
