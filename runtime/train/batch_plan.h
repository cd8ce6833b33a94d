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
// and the longest token count of it and every shorter bucket (so that a sample spilled into it
// fits, see Remainder), each rounded up to train.pad_multiple; not the upper edge, which
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
// implementation-defined. Each bucket's samples (in index order) are shuffled, bucket by bucket
// (the last bucket's carried samples first, on their own; spilled samples keep their order),
// then cut into global steps; then the order of all global steps is shuffled.
//
// Remainder: spill, a tail step, carry. Nothing is dropped and nothing is repeated. A bucket's
// samples that do not fill a whole global step (model_ranks x B, the tail of its order) are
// spilled into the next longer bucket, at the front of its order, ahead of that bucket's own
// samples, so they are trained in this epoch padded to the longer shape (a bucket's max_tokens is
// the longest of its own and every shorter bucket's, so any spilled sample fits). The last
// bucket's remainder becomes one tail step of B' = floor(remainder / model_ranks) < B samples
// per rank (every rank's batch of a step still has the same size; the tail step's shape is the
// last bucket's with B', an extra entry of buckets()); what is left, fewer than model_ranks
// samples, is deferred: carried into the next epoch's plan (build()'s `carried`), where it goes
// first in the last bucket's order, ahead of spilled and own samples, so a carried sample is never
// deferred twice. Over a run of E epochs every sample is trained E times, except the last epoch's
// deferred samples (fewer than model_ranks): they are deferred past the run's end (counted in
// the log), trained first if the run is extended, never silently lost. A carried sample is
// trained twice in the epoch it is carried into (once for the epoch before), possibly in one step.
// Steps per epoch: whole_epoch() counts them from the carried count alone; epochs differ by at
// most one step. Why not drop (the old policy) or only carry: at 4,096 model ranks a bucket's
// remainder is up to a whole global step, so every bucket would leave that much out every epoch
// (47.6% of 10^6 samples at B = 16); see docs/architecture.md.
//
// Position. A run's position is (epoch, step), step in [0, steps()). steps() depends on the
// epoch's carried samples (see above); PlanSchedule does the numbering. A checkpoint stores the
// position of the next batch to train (next() of the last trained one) with fingerprint() and
// the samples carried into that epoch; a resumed run builds the plan of that epoch with them,
// checks the fingerprint and continues at that step.
//
// Elastic resume (a job requeued on more or fewer model ranks mid-epoch). The epoch in progress
// goes on with the samples not yet trained on in it, none twice: build_rest() rebuilds the plans
// the epoch followed so far (one EpochSegment per model-rank count it ran with, each the number of
// steps trained with it), takes every sample those steps trained out, and deals the rest to the
// new model-rank count exactly as build() deals a whole split: into the buckets of the full plan
// for that count (same padded shapes, so a model still sees one shape per bucket), shuffled,
// cut into global steps, the remainder spilled, a tail step, the rest deferred to the next epoch,
// the steps shuffled. The epoch's carried samples are part of what the segments replay: a
// sample is owed once plus once per carried copy, a trained copy pays the carried one first. The shuffle is seeded from
// (train.seed, epoch, the segments), so the rest of the epoch is the same on every rank and every
// rerun with those segments. The next epoch is a whole plan for the new count. MosaicML
// streaming's elastic resume, for comparison, records only the samples seen in the epoch and
// needs a global order that does not depend on the rank count (canonical nodes a multiple of the
// physical ones); here any count works, because the order is rebuilt rather than sliced.
//
// Mixture (train.mixture: several caches in one run, docs/architecture.md "An epoch of a mixture").
// The caches share one index space (CacheReader::open_mixture): corpus c holds the indices
// [first_index(c), first_index(c + 1)). Without a mixture an epoch owes every sample of the split
// once. With one, corpus c's training samples (n_c of them) are walked in a cycle: a permutation
// of them seeded from (train.seed, c, cycle number), then another, and so on; epoch e owes the
// cycle positions [floor(e x m_c), floor((e + 1) x m_c)), m_c being the corpus's samples per epoch
// (mixture_quotas(): w_c x n_c, or with train.mixture_temperature a != 1 the same total shared out
// as (w_c x n_c)^a). So every sample of a corpus is trained once per n_c / m_c epochs, a corpus with
// weight 2 is seen twice per epoch (each sample once per cycle, two cycles per epoch), 0.5 every
// other epoch; the positions are integers computed in 1/65536 of a sample, so every rank and rerun
// picks the same ones. The owed copies are then dealt exactly as a plain epoch's (buckets from the
// whole split, spill, tail, carry), so the shapes stay those of the whole split. A one-cache run
// has no mixture and its plan is exactly as before.
//
// Temperature over languages or speakers (train.mixture_temperature_over). The cycles above are
// over cells: with `corpus` (the default) a cell is a corpus, as above. With `language` a cell is
// one corpus's samples of one language, and the temperature is applied to the languages: the
// epoch's samples (sum of w_c x n_c, unchanged) are shared out over the languages as M_l^a, M_l
// being the language's w_c x n_(c,l) summed over the corpora, then within a language over its
// cells in proportion to w_c x n_(c,l). With `speaker` a cell is one speaker (a speaker belongs to
// one corpus, CacheReader::open_mixture) and the temperature is applied to the speakers. a < 1
// then upsamples a small language or speaker as multilingual models sample (p ~ n^a); at a = 1
// every unit gives the same epoch as `corpus`, though in cycles of another order. One cache with a
// unit other than `corpus` is a mixture of one corpus of weight 1 (the caller makes it so).
// The units' ids are PlanSample::language and ::speaker, unified over the caches.
//
// Errors: settings that cannot make a plan are ConfigError naming the `train.` key to change;
// malformed samples (duplicate index, n_frames < 1) are DataError.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::cache {
struct IndexEntry;
}

namespace sluice::runtime {

// The version of the plan's rules, in fingerprint() and in checkpoints (latest.json
// "plan_version"): 1 dropped each bucket's remainder; 2 spills, adds a tail step and carries.
constexpr int kBatchPlanVersion = 2;

// One sample of the training split; index is its position in the cache (index.h5 row).
struct PlanSample {
  int64_t index = 0;
  int32_t n_frames = 0;
  int32_t n_tokens = 0;
  uint32_t language = 0;  // CacheReader::languages() position (used with MixtureUnit::language)
  uint32_t speaker = 0;   // CacheReader::speakers() position (used with MixtureUnit::speaker)
};

// One cache of a mixture: where its indices begin and its train.mixture weight.
struct MixtureCorpus {
  int64_t first_index = 0;  // cache indices [first_index, the next corpus's first_index)
  double weight = 1.0;      // > 0
};
bool operator==(const MixtureCorpus& a, const MixtureCorpus& b);

// What train.mixture_temperature shares the epoch over (see "Temperature over languages").
enum class MixtureUnit { corpus, language, speaker };
const char* mixture_unit_name(MixtureUnit unit);
// ConfigError naming train.mixture_temperature_over for anything but corpus, language, speaker.
MixtureUnit parse_mixture_unit(const std::string& name);

// The `train.` settings that shape the plan (defaults are the schema's).
struct BatchPlanConfig {
  std::vector<int32_t> bucket_edges;  // train.bucket_edges: frames, increasing; empty = quantiles
  int n_buckets = 8;                  // train.n_buckets: quantile buckets when edges are empty
  int batch_size = 16;                // train.batch_size: samples per model rank per step
  int64_t frame_budget = 0;           // train.frame_budget: padded frames per batch; > 0 wins
  uint64_t seed = 1234;               // train.seed: the shuffle's seed (with the epoch)
  int pad_multiple = 8;               // train.pad_multiple: padded lengths are multiples of it
  std::vector<MixtureCorpus> mixture;  // train.mixture: empty = one cache, every sample once an epoch
  double mixture_temperature = 1.0;    // train.mixture_temperature: a in (w_c x n_c)^a
  MixtureUnit mixture_unit = MixtureUnit::corpus;  // train.mixture_temperature_over
};

// A mixture's samples per epoch of each corpus, in 1/65536 of a sample (m_c above), for a split
// with `corpus_samples[c]` training samples in corpus c. Pure; the same on every platform.
std::vector<int64_t> mixture_quotas(const std::vector<int64_t>& corpus_samples, const BatchPlanConfig& config);
// The same for cells (see "Temperature over languages"): cell i has cell_samples[i] training
// samples of corpus cell_corpus[i] and is tempered as part of unit cell_unit[i] (for `corpus`
// the unit is the corpus). mixture_quotas() is this with one cell per corpus.
std::vector<int64_t> mixture_cell_quotas(const std::vector<int64_t>& cell_samples, const std::vector<size_t>& cell_corpus,
                                         const std::vector<uint32_t>& cell_unit, const BatchPlanConfig& config);
// Each unit's (language's or speaker's; corpus's for `corpus`) training samples per epoch in the
// plan of `samples` at these settings, in 1/65536 of a sample, as (unit id, quota, samples) sorted
// by unit id: what rank 0 prints and the report shows of a tempered mixture.
struct MixtureUnitShare {
  uint32_t unit = 0;
  int64_t quota = 0;    // in kMixtureQuotaUnit
  int64_t samples = 0;  // the unit's training samples
};
std::vector<MixtureUnitShare> mixture_unit_shares(const std::vector<PlanSample>& samples, const BatchPlanConfig& config);
inline constexpr int64_t kMixtureQuotaUnit = 65536;

// One bucket; every batch drawn from it is padded to [batch_size, max_frames] mels and
// [batch_size, max_tokens] tokens.
struct BucketShape {
  int32_t max_frames = 0;      // F: longest sample's frames rounded up to pad_multiple
  int32_t max_tokens = 0;      // T: longest token count of this and every shorter bucket, rounded up
  int32_t batch_size = 0;      // B: samples per model rank per step (the tail step: B')
  int32_t shortest_frames = 0; // the shortest sample in the bucket (for summaries)
  int64_t samples = 0;         // this epoch's samples in it: own (build_rest(): not yet trained),
                               // spilled in from the shorter bucket, and (the last) carried in
  int64_t steps = 0;           // global steps of this epoch drawn from this bucket
  int64_t spilled = 0;         // samples passed on to the next bucket (the last: to the tail step)
  bool tail = false;           // the tail step's shape (the last bucket's, with B' samples)
};

// What a whole epoch's plan (build()) holds, from the number of samples carried into it.
struct EpochCounts {
  int64_t steps = 0;
  int64_t deferred = 0;  // carried into the next epoch
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
  // `carried`: the cache indices the epoch before deferred (its deferred_indices()); none for a
  // run's first epoch. The same sample twice is allowed (owed twice).
  static BatchPlan build(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                         int model_ranks, int64_t epoch, const std::vector<int64_t>& carried = {});
  // The rest of `epoch` for `model_ranks` after the segments `earlier` (in the order they ran;
  // the first one's plan is build()'s, each later one's the build_rest() of those before it).
  // Empty `earlier` gives build()'s plan. Costs one build per segment. A segment with more steps
  // than its plan has is a DataError (the checkpoint does not belong to this split).
  // `carried`: the epoch's, as build() took it for the first segment.
  static BatchPlan build_rest(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                              int model_ranks, int64_t epoch, const std::vector<EpochSegment>& earlier,
                              const std::vector<int64_t>& carried = {});
  // fingerprint() of the plans build() makes from these inputs, without building one.
  static std::string fingerprint_of(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                    int model_ranks);

  int64_t epoch() const { return epoch_; }
  int model_ranks() const { return model_ranks_; }
  // Global steps in this epoch (whole epochs: whole_epoch(carried).steps).
  int64_t steps() const { return static_cast<int64_t>(step_bucket_.size()); }
  // The batch of `model_rank` (0-based among model ranks) at global step `step`; every rank's
  // batch of one step comes from the same bucket.
  const PlannedBatch& batch(int64_t step, int model_rank) const;
  const std::vector<BucketShape>& buckets() const { return buckets_; }

  // Samples this epoch defers to the next (fewer than model_ranks), and which ones (sorted).
  int64_t deferred_samples() const { return static_cast<int64_t>(deferred_.size()); }
  const std::vector<int64_t>& deferred_indices() const { return deferred_; }
  // The samples carried into this epoch (build()'s `carried`, sorted).
  const std::vector<int64_t>& carried() const { return carried_; }
  // Samples trained in a longer bucket than their own this epoch.
  int64_t spilled_samples() const;
  // The counts of a whole epoch of this plan's split, settings and model ranks with `carried`
  // samples carried in, without building it (O(buckets)).
  // A mixture's epochs owe different samples: `epoch` says which (ignored without a mixture).
  EpochCounts whole_epoch(int64_t carried, int64_t epoch = -1) const;  // -1: this plan's epoch
  // The copies this epoch owes of the split's samples (one each without a mixture; build_rest():
  // the whole epoch's, trained or not), and how many of them come from each corpus of the mixture.
  int64_t owed_samples() const { return owed_; }
  const std::vector<int64_t>& owed_per_corpus() const { return owed_per_corpus_; }
  // build_rest(): the segments this plan continues after, and the samples they trained (sorted;
  // a sample twice when both its copies were).
  const std::vector<EpochSegment>& earlier() const { return earlier_; }
  const std::vector<int64_t>& trained_earlier() const { return trained_earlier_; }

  // The position after `at`: the next step, or step 0 of the next epoch after the last one
  // (whose batches need that epoch's plan). `at` may be in any epoch.
  PlanPosition next(PlanPosition at) const;
  // 32 hex digits over everything that defines the plan except the epoch (split, settings,
  // model ranks): a checkpoint's position is valid for a plan with the same fingerprint. A
  // build_rest() plan has the fingerprint of build()'s for its model-rank count.
  const std::string& fingerprint() const { return fingerprint_; }

  // A table of the buckets (frames, padded shape, B, samples, steps, spilled), the tail step and
  // the deferred and carried counts, for rank 0 to print.
  std::string summary() const;

 private:
  BatchPlan() = default;
  // The copies of the index-sorted split's samples still owed (one each plus one per entry of
  // `carried`, positions in `sorted`, less `trained`'s counts; empty: none trained), dealt to
  // `model_ranks` with the shuffle of (seed, epoch, earlier).
  static BatchPlan deal(const std::vector<PlanSample>& sorted, const BatchPlanConfig& config, int model_ranks,
                        int64_t epoch, const std::vector<EpochSegment>& earlier, const std::vector<size_t>& carried,
                        const std::vector<uint16_t>& trained);

  int64_t epoch_ = 0;
  int model_ranks_ = 1;
  int64_t frame_budget_ = 0;
  std::vector<BucketShape> buckets_;
  std::vector<int32_t> step_bucket_;     // bucket of each global step
  std::vector<PlannedBatch> batches_;    // step-major: batches_[step * model_ranks + rank]
  std::vector<int64_t> deferred_;
  std::vector<int64_t> carried_;
  std::vector<int64_t> split_per_bucket_;  // the split's own samples per bucket (whole_epoch())
  int64_t owed_ = 0;
  std::vector<int64_t> owed_per_corpus_;
  // A mixture's whole_epoch() needs the owed copies of any epoch: the split, settings and the
  // bucket of every split position (shared by the plans of one schedule's epochs).
  struct MixtureCounting;
  friend std::vector<MixtureUnitShare> mixture_unit_shares(const std::vector<PlanSample>&, const BatchPlanConfig&);
  std::shared_ptr<const MixtureCounting> mixture_;
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
