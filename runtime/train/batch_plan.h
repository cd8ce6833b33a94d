#pragma once
// The batch plan of `sluice train`: which samples every model rank trains on at every step of an
// epoch. Every rank computes the identical plan from the same inputs (the training split's
// lengths, the `train.` settings, the number of model ranks, the epoch), so no plan is ever sent.
//
// Buckets. Samples are grouped by mel length. Bucket edges are upper bounds in frames,
// inclusive: with edges e0 < e1 < ... bucket 0 holds n_frames <= e0, bucket i holds
// e(i-1) < n_frames <= e(i), and one more bucket holds everything longer than the last edge.
// Edges come from train.bucket_edges, or, when that is empty, from train.n_buckets quantiles of
// the split's lengths, each rounded up to train.pad_multiple (a sample that fits a bucket's padded
// shape is never pushed into the next one); equal quantiles collapse, so there may be fewer.
//
// Padding (one static shape per bucket). A bucket's padded shape is its longest sample's frames
// and its longest token count, each rounded up to train.pad_multiple; not the upper edge, which
// would pad more and does not exist for the last bucket. The shape is computed over the whole
// split, never over one epoch's samples, so it is the same in every epoch: a model sees one
// shape per bucket for the whole run and compiles (or captures a CUDA graph) once per bucket.
//
// Batch size per bucket: train.frame_budget > 0 gives B = floor(frame_budget / max_frames),
// at least 1 (a bucket longer than the budget gets B = 1 and is marked in summary()); otherwise
// B = train.batch_size. frame_budget > 0 takes precedence over batch_size.
//
// Small buckets are merged. A bucket with fewer samples than one global step needs
// (model_ranks x B) would never be trained; it is merged into its longer neighbour (the last
// bucket into its shorter one), whose padded shape then holds both, until every bucket fills at
// least one step. Merging depends only on the split and settings, never on the epoch.
//
// Shuffle. One std::mt19937_64 per epoch, seeded from (train.seed, epoch) with splitmix64 (the
// engine's output is fixed by the C++ standard); bounded draws and Fisher-Yates are written out
// here, never std::shuffle or std::uniform_int_distribution, whose algorithms are
// implementation-defined. Each bucket's samples (in index order) are shuffled, bucket by bucket,
// then cut into global steps; then the order of all global steps is shuffled.
//
// Remainder: drop. Within a bucket, the samples that do not fill a whole global step
// (model_ranks x B) are left out of this epoch; they are the tail of this epoch's shuffle, so a
// different set each epoch. Fewer than model_ranks x B samples per bucket are dropped, the count
// is the same in every epoch (dropped_samples()), and every model rank gets exactly steps()
// batches per epoch, so no collective waits for a rank that ran out.
//
// Position. A run's position is (epoch, step), step in [0, steps()). steps() is the same for every
// epoch of one split, settings and model-rank count. A checkpoint stores the position of the next
// batch to train (next() of the last trained one) with fingerprint(); a resumed run builds the
// plan of that epoch, checks the fingerprint and continues at that step.
//
// Elastic resume (a job requeued on more or fewer model ranks mid-epoch). The epoch in progress
// goes on with the samples not yet trained on in it, none twice: build_rest() rebuilds the plans
// the epoch followed so far (one EpochSegment per model-rank count it ran with, each the number of
// steps trained with it), takes every sample those steps trained out, and deals the rest to the
// new model-rank count exactly as build() deals a whole split: into the buckets of the full plan
// for that count (same padded shapes, so a model still sees one shape per bucket), shuffled,
// cut into global steps, the remainder dropped, the steps shuffled. The shuffle is seeded from
// (train.seed, epoch, the segments), so the rest of the epoch is the same on every rank and every
// rerun with those segments. The next epoch is a whole plan for the new count. MosaicML
// streaming's elastic resume, for comparison, records only the samples seen in the epoch and
// needs a global order that does not depend on the rank count (canonical nodes a multiple of the
// physical ones); here any count works, because the order is rebuilt rather than sliced.
//
// Errors: settings that cannot make a plan are ConfigError naming the `train.` key to change;
// malformed samples (duplicate index, n_frames < 1) are DataError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cache {
struct IndexEntry;
}

namespace sluice::runtime {

// One sample of the training split; index is its position in the cache (index.h5 row).
struct PlanSample {
  int64_t index = 0;
  int32_t n_frames = 0;
  int32_t n_tokens = 0;
};

// The `train.` settings that shape the plan (defaults are the schema's).
struct BatchPlanConfig {
  std::vector<int32_t> bucket_edges;  // train.bucket_edges: frames, increasing; empty = quantiles
  int n_buckets = 8;                  // train.n_buckets: quantile buckets when edges are empty
  int batch_size = 16;                // train.batch_size: samples per model rank per step
  int64_t frame_budget = 0;           // train.frame_budget: padded frames per batch; > 0 wins
  uint64_t seed = 1234;               // train.seed: the shuffle's seed (with the epoch)
  int pad_multiple = 8;               // train.pad_multiple: padded lengths are multiples of it
};

// One bucket; every batch drawn from it is padded to [batch_size, max_frames] mels and
// [batch_size, max_tokens] tokens.
struct BucketShape {
  int32_t max_frames = 0;      // F: longest sample's frames rounded up to pad_multiple
  int32_t max_tokens = 0;      // T: longest sample's tokens rounded up to pad_multiple
  int32_t batch_size = 0;      // B: samples per model rank per step
  int32_t shortest_frames = 0; // the shortest sample in the bucket (for summaries)
  int64_t samples = 0;         // samples of the split in this bucket (build_rest(): not yet trained)
  int64_t steps = 0;           // global steps per epoch drawn from this bucket
};

// One model rank's batch of one global step: `samples` are cache indices, in batch order.
struct PlannedBatch {
  int32_t bucket = 0;
  std::vector<int64_t> samples;
};

struct PlanPosition {
  int64_t epoch = 0;
  int64_t step = 0;
};
bool operator==(const PlanPosition& a, const PlanPosition& b);
bool operator!=(const PlanPosition& a, const PlanPosition& b);

// One stretch of an epoch trained before an elastic resume: the model-rank count its plan had and
// how many of that plan's steps were trained.
struct EpochSegment {
  int model_ranks = 0;
  int64_t steps = 0;
};
bool operator==(const EpochSegment& a, const EpochSegment& b);

class BatchPlan {
 public:
  // The plan of one epoch. Pure: the same arguments give the same plan on every rank, platform
  // and run; the order of `samples` does not matter. O(N log N); ~1 ms per 10k samples.
  static BatchPlan build(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                         int model_ranks, int64_t epoch);
  // The rest of `epoch` for `model_ranks` after the segments `earlier` (in the order they ran;
  // the first one's plan is build()'s, each later one's the build_rest() of those before it).
  // Empty `earlier` gives build()'s plan. Costs one build per segment. A segment with more steps
  // than its plan has is a DataError (the checkpoint does not belong to this split).
  static BatchPlan build_rest(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                              int model_ranks, int64_t epoch, const std::vector<EpochSegment>& earlier);
  // fingerprint() of the plans build() makes from these inputs, without building one.
  static std::string fingerprint_of(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                    int model_ranks);

  int64_t epoch() const { return epoch_; }
  int model_ranks() const { return model_ranks_; }
  // Global steps in this epoch (the same in every epoch).
  int64_t steps() const { return static_cast<int64_t>(step_bucket_.size()); }
  // The batch of `model_rank` (0-based among model ranks) at global step `step`; every rank's
  // batch of one step comes from the same bucket.
  const PlannedBatch& batch(int64_t step, int model_rank) const;
  const std::vector<BucketShape>& buckets() const { return buckets_; }

  // Samples of the split left out of this epoch by the remainder policy, and which ones.
  int64_t dropped_samples() const { return static_cast<int64_t>(dropped_.size()); }
  const std::vector<int64_t>& dropped_indices() const { return dropped_; }
  // build_rest(): the segments this plan continues after, and the samples they trained (sorted).
  const std::vector<EpochSegment>& earlier() const { return earlier_; }
  const std::vector<int64_t>& trained_earlier() const { return trained_earlier_; }

  // The position after `at`: the next step, or step 0 of the next epoch after the last one
  // (whose batches need that epoch's plan). `at` may be in any epoch.
  PlanPosition next(PlanPosition at) const;
  // Steps trained before `at` since (0, 0): epoch * steps() + step (for schedules and logs).
  int64_t global_step(PlanPosition at) const;

  // 32 hex digits over everything that defines the plan except the epoch (split, settings,
  // model ranks): a checkpoint's position is valid for a plan with the same fingerprint. A
  // build_rest() plan has the fingerprint of build()'s for its model-rank count.
  const std::string& fingerprint() const { return fingerprint_; }

  // A table of the buckets (frames, padded shape, B, samples, steps, dropped) for rank 0 to print.
  std::string summary() const;

 private:
  BatchPlan() = default;
  // The samples of the index-sorted split not marked in `trained` (empty: all), dealt to
  // `model_ranks` with the shuffle of (seed, epoch, earlier).
  static BatchPlan deal(const std::vector<PlanSample>& sorted, const BatchPlanConfig& config, int model_ranks,
                        int64_t epoch, const std::vector<EpochSegment>& earlier, const std::vector<char>& trained);

  int64_t epoch_ = 0;
  int model_ranks_ = 1;
  int64_t frame_budget_ = 0;
  std::vector<BucketShape> buckets_;
  std::vector<int32_t> step_bucket_;     // bucket of each global step
  std::vector<PlannedBatch> batches_;    // step-major: batches_[step * model_ranks + rank]
  std::vector<int64_t> dropped_;
  std::vector<EpochSegment> earlier_;
  std::vector<int64_t> trained_earlier_;
  std::string fingerprint_;
};

// The validation split: true when `id` belongs to it. Decided by XXH64(id, seed) alone, so a
// sample stays on the same side across runs, rank counts and corpus growth; about `fraction`
// of the ids are chosen. Use a seed of its own, not train.seed, so that changing the shuffle does
// not move samples between the splits. fraction outside [0, 1] is a ConfigError.
bool is_validation(const std::string& id, double fraction, uint64_t seed);

struct SplitSamples {
  std::vector<PlanSample> train;
  std::vector<PlanSample> validation;
};
// Splits a cache's index (entries[i] is cache index i) with is_validation().
SplitSamples split_samples(const std::vector<cache::IndexEntry>& entries, double fraction,
                           uint64_t seed);

}  // namespace sluice::runtime
