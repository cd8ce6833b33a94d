#include "timing/stage.h"

#include <array>

namespace sluice::timing {
namespace {

constexpr std::array<std::string_view, stage_count> names = {
    "cache_read", "collate",   "wait_for_reader", "host_to_device", "gpu_work",   "credit_wait",
    "send",       "batch_wait", "forward",        "backward",       "allreduce_exposed",
    "allreduce_overlapped", "optimizer", "sync",  "validation",     "checkpoint", "gpu_step",
    "decode",     "resample",  "features",  "write"};

}  // namespace

std::string_view to_string(Stage stage) {
  const auto index = static_cast<size_t>(stage);
  return index < names.size() ? names[index] : std::string_view("unknown");
}

std::optional<Stage> stage_from_string(std::string_view name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<Stage>(i);
  }
  return std::nullopt;
}

}  // namespace sluice::timing
