#pragma once
// How much of the model's work is padding. Every batch of a bucket is padded to the bucket's shape
// (runtime/train/batch_plan.h): [B, max_frames] mels and [B, max_tokens] tokens. The plan is
// deterministic, so the padding of every planned batch is known from the plan and the split's
// lengths before a step runs. Rank 0 of `sluice train` writes it to RUN_DIR/padding.json; the
// report (docs/report.md, "Padding") reads it.
//
// Per bucket and overall, over one epoch's planned batches (every model rank's): real frames
// (the samples' n_frames), padded frames (B x max_frames per batch), the same for tokens, and
// real / padded. Model work grows with the padded frames, so 1 - real / padded is the share of it
// spent on padding. For quantile buckets (train.bucket_edges empty) the same figures for more
// buckets (2x, 4x train.n_buckets) say what raising train.n_buckets would save; the share does not
// depend on the batch size, so train.frame_budget changes how many samples a batch holds, not it.
//
// FORMAT "sluice-padding/1" (JSON object):
//   format, model_ranks, n_buckets, bucket_edges, batch_size, frame_budget, pad_multiple
//   buckets   [{bucket, shortest_frames, max_frames, max_tokens, batch_size, batches, samples,
//               real_frames, padded_frames, real_tokens, padded_tokens, frame_efficiency,
//               token_efficiency, tail}]   (efficiency = real / padded; tail: the epoch's tail step)
//   remainder {spilled, deferred, deferred_past_end}  (epoch 0: samples trained in a longer bucket,
//              carried into epoch 1; deferred_past_end: after the run's last epoch, absent when the
//              run ends at train.steps; batch_plan.h, "Remainder")
//   total     {batches, samples, real_frames, padded_frames, real_tokens, padded_tokens,
//              frame_efficiency, token_efficiency}
//   corpora   [{corpus, dir, weight, samples, real_frames, padded_frames, padding_frames,
//              sample_share, padding_share, frame_share}]  (train.mixture only; epoch 0's planned
//              batches: each corpus's samples, the padding its samples' rows carry (padded - real
//              frames) and its real frames (input time), each as a share of all corpora's)
//   mixture_units {over, temperature, units: [{unit, name, samples, per_epoch}], others: {units,
//              samples, per_epoch}}  (train.mixture_temperature_over language or speaker only: each
//              unit's training samples and samples per epoch (mixture_unit_shares()), the most
//              sampled first, at most 16; "others" sums the rest, absent when none are left out)
//   alternatives [{n_buckets, buckets, frame_efficiency, token_efficiency,
//                  padded_frames_saved_fraction}]  (quantile buckets only; saved: of today's padded frames
//                  per real frame)
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/batch_plan.h"

namespace sluice::runtime {

inline constexpr const char* padding_format = "sluice-padding/1";

struct PaddingFigures {
  int64_t batches = 0;  // one model rank's batch counts once
  int64_t samples = 0;
  int64_t real_frames = 0, padded_frames = 0;
  int64_t real_tokens = 0, padded_tokens = 0;
  double frame_efficiency() const;  // real / padded, 1 when nothing is padded
  double token_efficiency() const;
  void add(const PaddingFigures& other);
  nlohmann::json to_json() const;
};

struct BucketPadding {
  int bucket = 0;
  BucketShape shape;
  PaddingFigures figures;
};

struct PaddingSummary {
  std::vector<BucketPadding> buckets;
  std::vector<PaddingFigures> corpora;  // per corpus of config.mixture (empty without one)
  PaddingFigures total;
  int64_t spilled = 0;   // BatchPlan::spilled_samples()
  int64_t deferred = 0;  // BatchPlan::deferred_samples()
};

// Epoch 0's plan of `samples` under `config` with `model_ranks` model ranks. Pure.
PaddingSummary summarize_padding(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                 int model_ranks);

// "mixture_units" above for the `shown` most sampled units; `names`: the unit ids' names
// (CacheReader::languages() or speakers()). Null for train.mixture_temperature_over corpus.
nlohmann::json mixture_units_json(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                  const std::vector<std::string>& names, size_t shown = 16);

// The whole "sluice-padding/1" document, alternatives included; `deferred_past_end` < 0: the run
// ends at train.steps, not after whole epochs.
// `corpus_dirs`: train.mixture's caches, named in "corpora"; `unit_names`: see mixture_units_json().
nlohmann::json padding_json(const std::vector<PlanSample>& samples, const BatchPlanConfig& config, int model_ranks,
                            int64_t deferred_past_end = -1, const std::vector<std::string>& corpus_dirs = {},
                            const std::vector<std::string>& unit_names = {});

// RUN_DIR/padding.json (atomically).
void write_padding_summary(const std::filesystem::path& run_dir, const std::vector<PlanSample>& samples,
                           const BatchPlanConfig& config, int model_ranks, int64_t deferred_past_end = -1,
                           const std::vector<std::string>& corpus_dirs = {},
                           const std::vector<std::string>& unit_names = {});

}  // namespace sluice::runtime
