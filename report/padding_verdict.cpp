// The padding verdict: how much of the model's work the planned batches spend on padding
// (RUN_DIR/padding.json, runtime/train/padding_summary.h) and what more buckets would save.
#include <spdlog/fmt/fmt.h>

#include "report/stall_verdicts.h"

namespace sluice::report {
namespace {

using nlohmann::json;

// "bucket 1 (frames 345-856): 64.2% real" for the bucket whose frames are least real.
std::string bucket_lines(const json& buckets, int& worst) {
  std::string text;
  double worst_efficiency = 2;
  for (const auto& b : buckets) {
    const double e = b.value("frame_efficiency", 1.0);
    text += fmt::format("{}bucket {} ({}-{} frames padded to {}, {} batches) {}", text.empty() ? "" : ", ",
                        b.value("bucket", 0), b.value("shortest_frames", 0), b.value("max_frames", 0),
                        b.value("max_frames", 0), b.value("batches", 0), percent(e));
    if (e < worst_efficiency) {
      worst_efficiency = e;
      worst = b.value("bucket", 0);
    }
  }
  return text;
}

}  // namespace

std::optional<StallVerdict> padding_verdict(const json& padding) {
  if (!padding.is_object() || !padding.contains("total")) return std::nullopt;
  const json& total = padding["total"];
  const double frames = total.value("frame_efficiency", 1.0), tokens = total.value("token_efficiency", 1.0);
  const double waste = 1.0 - frames;
  if (waste < padding_waste_moderate) return std::nullopt;
  StallVerdict v(VerdictKind::padding, waste >= padding_waste_high ? Severity::high : Severity::moderate);
  int worst = -1;
  const std::string per_bucket = bucket_lines(padding.value("buckets", json::array()), worst);
  v.summary = fmt::format("padding is {} of the model's work: real / padded frames {} (tokens {}) over one epoch's "
                          "{} planned batches ({} at least {}); real frames per bucket: {}",
                          percent(waste), percent(frames), percent(tokens), total.value("batches", 0), to_string(v.severity),
                          percent(v.severity == Severity::high ? padding_waste_high : padding_waste_moderate), per_bucket);
  const json best = [&] {
    json pick;
    for (const auto& alt : padding.value("alternatives", json::array())) {
      if (pick.is_null() || alt.value("padded_frames_saved_fraction", 0.0) > pick.value("padded_frames_saved_fraction", 0.0)) {
        pick = alt;
      }
    }
    return pick;
  }();
  const int64_t budget = padding.value("frame_budget", int64_t{0});
  const std::string budget_note =
      budget > 0 ? fmt::format("; train.frame_budget ({}) keeps the padded frames per batch near the budget as buckets "
                               "narrow", budget)
                 : "; with more buckets, set train.frame_budget so each bucket's batch size follows its length "
                   "(padded frames per batch near the budget) instead of a fixed train.batch_size";
  if (!best.is_null() && best.value("padded_frames_saved_fraction", 0.0) > 0.01) {
    v.recommendation = fmt::format("raise train.n_buckets from {} to {}: real / padded frames {} -> {}, {} fewer padded "
                                   "frames (and model work) for the same samples{}",
                                   padding.value("n_buckets", 0), best.value("n_buckets", 0), percent(frames),
                                   percent(best.value("frame_efficiency", 1.0)),
                                   percent(best.value("padded_frames_saved_fraction", 0.0)), budget_note);
  } else if (!padding.value("bucket_edges", json::array()).empty()) {
    v.recommendation = fmt::format("train.bucket_edges fixes the buckets (train.n_buckets has no effect): add edges "
                                   "inside bucket {}, whose samples are the least real, or clear train.bucket_edges "
                                   "and raise train.n_buckets{}",
                                   worst, budget_note);
  } else {
    v.recommendation = fmt::format("more buckets (train.n_buckets from {}) would not pad less for this split: its "
                                   "lengths within a bucket are spread that widely; shorten the longest samples "
                                   "(prep.max_seconds) if the longest bucket pads most",
                                   padding.value("n_buckets", 0));
  }
  v.numbers = {{"waste_fraction", waste},
               {"frame_efficiency", frames},
               {"token_efficiency", tokens},
               {"worst_bucket", worst},
               {"n_buckets", padding.value("n_buckets", 0)},
               {"frame_budget", budget},
               {"buckets", padding.value("buckets", json::array())},
               {"best_alternative", best}};
  return v;
}

}  // namespace sluice::report
