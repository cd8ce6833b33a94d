#include "runtime/train/batch_plan.h"

#include "common/splitmix64.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>

#include <xxhash.h>

#include "cache/cache_reader.h"
#include "common/error.h"
#include "common/fingerprint.h"

namespace sluice::runtime {
namespace {

[[noreturn]] void internal_error(const std::string& message) {
  throw Error(ErrorKind::internal, "batch plan: " + message);
}

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int32_t round_up32(int32_t value, int multiple, const char* what) {
  const int64_t rounded = round_up(value, multiple);
  if (rounded > std::numeric_limits<int32_t>::max()) {
    throw DataError(std::string("batch plan: a sample's ") + what + " (" + std::to_string(value) +
                    ") rounded up to train.pad_multiple overflows int32");
  }
  return static_cast<int32_t>(rounded);
}


// Uniform in [0, n), n >= 1, by rejection: the accepted range [2^64 mod n, 2^64) holds a
// multiple of n values, so `x % n` is unbiased. Written out because
// std::uniform_int_distribution's algorithm differs between standard libraries.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  uint64_t x = engine();
  while (x < threshold) x = engine();
  return x % n;
}

// Fisher-Yates (Durstenfeld): for i = n-1 .. 1, swap element i with a uniform j in [0, i].
template <typename T>
void shuffle(std::vector<T>& items, std::mt19937_64& engine) {
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(engine, i));
    std::swap(items[i - 1], items[j]);
  }
}

void check_config(const BatchPlanConfig& config, int model_ranks) {
  if (config.batch_size < 0) {
    throw ConfigError("train.batch_size = " + std::to_string(config.batch_size) +
                      " is negative: set it to the samples per batch (e.g. 16), or 0 with "
                      "train.frame_budget");
  }
  if (config.frame_budget < 0) {
    throw ConfigError("train.frame_budget = " + std::to_string(config.frame_budget) +
                      " is negative: set it to the padded mel frames per batch, or 0 to use "
                      "train.batch_size");
  }
  if (config.batch_size == 0 && config.frame_budget == 0) {
    throw ConfigError("train.batch_size and train.frame_budget are both 0: set train.batch_size "
                      "(samples per batch, e.g. 16) or train.frame_budget (padded mel frames per "
                      "batch, e.g. 16000)");
  }
  if (config.pad_multiple < 1) {
    throw ConfigError("train.pad_multiple = " + std::to_string(config.pad_multiple) +
                      " must be at least 1 (1 pads to the longest sample exactly; 8 is the default)");
  }
  if (config.bucket_edges.empty() && config.n_buckets < 1) {
    throw ConfigError("train.n_buckets = " + std::to_string(config.n_buckets) +
                      " must be at least 1 when train.bucket_edges is empty (8 is the default)");
  }
  for (size_t i = 0; i < config.bucket_edges.size(); ++i) {
    const int32_t edge = config.bucket_edges[i];
    if (edge < 1 || (i > 0 && edge <= config.bucket_edges[i - 1])) {
      std::string edges;
      for (int32_t e : config.bucket_edges) edges += (edges.empty() ? "" : ", ") + std::to_string(e);
      throw ConfigError("train.bucket_edges = [" + edges + "]: edge " + std::to_string(i) + " (" +
                        std::to_string(edge) +
                        ") is not above the one before; the edges are mel frame counts, positive "
                        "and strictly increasing, e.g. [200, 400, 800]");
    }
  }
  for (size_t c = 0; c < config.mixture.size(); ++c) {
    const MixtureCorpus& corpus = config.mixture[c];
    if (!(corpus.weight > 0.0 && corpus.weight <= 1000.0)) {
      throw ConfigError("train.mixture: corpus " + std::to_string(c) + " has weight " + std::to_string(corpus.weight) +
                        " (a weight is above 0 and at most 1000, e.g. \"cacheA:1, cacheB:0.5\")");
    }
    if (c > 0 && corpus.first_index <= config.mixture[c - 1].first_index) {
      internal_error("train.mixture: corpus " + std::to_string(c) + " begins at cache index " +
                     std::to_string(corpus.first_index) + ", not after the one before it");
    }
  }
  if (!config.mixture.empty() && !(config.mixture_temperature > 0.0 && config.mixture_temperature <= 10.0)) {
    throw ConfigError("train.mixture_temperature = " + std::to_string(config.mixture_temperature) +
                      " must be above 0 and at most 10 (1 keeps the weights as given; 0.5 flattens them)");
  }
  if (model_ranks < 1) {
    throw ConfigError("batch plan for " + std::to_string(model_ranks) +
                      " model ranks: the role plan needs at least one model rank (roles.*)");
  }
}

// Quantile edges: the lengths below which 1/n, 2/n, ... of the samples fall, rounded up to
// pad_multiple, without repeats, and below the longest sample (the last bucket is open).
std::vector<int32_t> quantile_edges(std::vector<int32_t> frames, int n_buckets, int pad_multiple) {
  std::sort(frames.begin(), frames.end());
  const int64_t n = static_cast<int64_t>(frames.size());
  std::vector<int32_t> edges;
  for (int64_t b = 1; b < n_buckets; ++b) {
    const int64_t at = std::max<int64_t>(0, b * n / n_buckets - 1);
    const int32_t edge = round_up32(frames[static_cast<size_t>(at)], pad_multiple, "n_frames");
    if (edge >= frames.back()) break;
    if (edges.empty() || edge > edges.back()) edges.push_back(edge);
  }
  return edges;
}

struct Bucket {
  std::vector<size_t> members;  // positions in the index-sorted samples, ascending
  BucketShape shape;
};

void shape_bucket(Bucket& bucket, const std::vector<PlanSample>& samples,
                  const BatchPlanConfig& config) {
  int32_t longest = 0, shortest = std::numeric_limits<int32_t>::max(), tokens = 0;
  for (size_t i : bucket.members) {
    longest = std::max(longest, samples[i].n_frames);
    shortest = std::min(shortest, samples[i].n_frames);
    tokens = std::max(tokens, samples[i].n_tokens);
  }
  BucketShape& shape = bucket.shape;
  shape.max_frames = round_up32(longest, config.pad_multiple, "n_frames");
  shape.max_tokens = round_up32(tokens, config.pad_multiple, "n_tokens");
  shape.shortest_frames = shortest;
  shape.samples = static_cast<int64_t>(bucket.members.size());
  if (config.frame_budget > 0) {
    const int64_t fit = config.frame_budget / shape.max_frames;
    shape.batch_size = static_cast<int32_t>(
        std::clamp<int64_t>(fit, 1, std::numeric_limits<int32_t>::max()));
  } else {
    shape.batch_size = config.batch_size;
  }
}

int64_t step_size(const Bucket& bucket, int model_ranks) {
  return int64_t{bucket.shape.batch_size} * model_ranks;
}

// The buckets of the whole split: assigned by edges, empty ones removed, small ones merged
// (see the header), shaped. Independent of the epoch.
std::vector<Bucket> make_buckets(const std::vector<PlanSample>& samples,
                                 const BatchPlanConfig& config, int model_ranks) {
  std::vector<int32_t> edges = config.bucket_edges;
  if (edges.empty()) {
    std::vector<int32_t> frames(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) frames[i] = samples[i].n_frames;
    edges = quantile_edges(std::move(frames), config.n_buckets, config.pad_multiple);
  }
  std::vector<Bucket> by_edge(edges.size() + 1);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto edge = std::lower_bound(edges.begin(), edges.end(), samples[i].n_frames);
    by_edge[static_cast<size_t>(edge - edges.begin())].members.push_back(i);
  }
  std::vector<Bucket> buckets;
  for (auto& bucket : by_edge) {
    if (bucket.members.empty()) continue;
    shape_bucket(bucket, samples, config);
    buckets.push_back(std::move(bucket));
  }

  for (;;) {
    const auto small = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
      return b.shape.samples < step_size(b, model_ranks);
    });
    if (small == buckets.end() || buckets.size() == 1) break;
    // Into the longer neighbour; the last bucket into the shorter one. Both member lists are
    // ascending and disjoint, so a merge keeps them ascending.
    const auto into = small + 1 == buckets.end() ? small - 1 : small + 1;
    std::vector<size_t> members;
    members.reserve(small->members.size() + into->members.size());
    std::merge(small->members.begin(), small->members.end(), into->members.begin(),
               into->members.end(), std::back_inserter(members));
    into->members = std::move(members);
    shape_bucket(*into, samples, config);
    buckets.erase(small);
  }

  // A sample spilled from a shorter bucket (see the header's Remainder) must fit the tokens too.
  for (size_t b = 1; b < buckets.size(); ++b) {
    buckets[b].shape.max_tokens = std::max(buckets[b].shape.max_tokens, buckets[b - 1].shape.max_tokens);
  }

  const Bucket& shortest = buckets.front();
  if (config.frame_budget > 0 && config.frame_budget < shortest.shape.max_frames) {
    throw ConfigError("train.frame_budget = " + std::to_string(config.frame_budget) +
                      " is smaller than the shortest bucket's padded length (" +
                      std::to_string(shortest.shape.max_frames) +
                      " frames), so no batch would fit it: raise train.frame_budget to at least " +
                      std::to_string(shortest.shape.max_frames) + " (typically 16 times that)");
  }
  if (buckets.size() == 1 && shortest.shape.samples < step_size(shortest, model_ranks)) {
    const std::string size_key = config.frame_budget > 0 ? "train.frame_budget" : "train.batch_size";
    throw ConfigError(std::to_string(shortest.shape.samples) +
                      " training samples cannot fill one global step of " +
                      std::to_string(model_ranks) + " model rank(s) x " +
                      std::to_string(shortest.shape.batch_size) + " samples: lower " + size_key +
                      ", use fewer model ranks, or train on more data");
  }
  return buckets;
}

std::string plan_fingerprint(const std::vector<PlanSample>& samples,
                             const BatchPlanConfig& config, int model_ranks) {
  Fingerprint fingerprint;
  fingerprint.add("batch_plan_version", int64_t{kBatchPlanVersion});
  std::string edges;
  for (int32_t edge : config.bucket_edges) edges += std::to_string(edge) + ",";
  fingerprint.add("bucket_edges", edges).add("n_buckets", config.n_buckets);
  fingerprint.add("batch_size", config.batch_size).add("frame_budget", config.frame_budget);
  fingerprint.add("seed", static_cast<int64_t>(config.seed));
  fingerprint.add("pad_multiple", config.pad_multiple).add("model_ranks", model_ranks);
  fingerprint.add("samples", static_cast<int64_t>(samples.size()));
  if (!config.mixture.empty()) {  // absent for one cache, so that its fingerprint is what it was
    std::string mixture;
    for (const MixtureCorpus& corpus : config.mixture) {
      char weight[64];
      std::snprintf(weight, sizeof weight, "%a", corpus.weight);  // exact
      mixture += std::to_string(corpus.first_index) + ":" + weight + ",";
    }
    char temperature[64];
    std::snprintf(temperature, sizeof temperature, "%a", config.mixture_temperature);
    fingerprint.add("mixture", mixture).add("mixture_temperature", std::string(temperature));
    if (config.mixture_unit != MixtureUnit::corpus) {  // absent for corpus, as before the units
      fingerprint.add("mixture_unit", std::string(mixture_unit_name(config.mixture_unit)));
      std::string units(samples.size() * 4, '\0');
      for (size_t i = 0; i < samples.size(); ++i) {
        const uint32_t unit = config.mixture_unit == MixtureUnit::language ? samples[i].language : samples[i].speaker;
        std::memcpy(&units[i * 4], &unit, 4);
      }
      fingerprint.add("units", units);
    }
  }
  // One label for the whole table, as bytes (host order: ranks of one job share it); a
  // field-by-field add would cost three hash calls per sample.
  constexpr size_t kRow = 16;  // index int64, n_frames int32, n_tokens int32
  std::string table(samples.size() * kRow, '\0');
  for (size_t i = 0; i < samples.size(); ++i) {
    char* at = &table[i * kRow];
    std::memcpy(at, &samples[i].index, 8);
    std::memcpy(at + 8, &samples[i].n_frames, 4);
    std::memcpy(at + 12, &samples[i].n_tokens, 4);
  }
  fingerprint.add("lengths", table);
  return fingerprint.hex();
}

}  // namespace

bool operator==(const PlanPosition& a, const PlanPosition& b) {
  return a.epoch == b.epoch && a.step == b.step;
}
bool operator!=(const PlanPosition& a, const PlanPosition& b) { return !(a == b); }

namespace {

// The split in index order, which makes the plan independent of the caller's order; checked.
std::vector<PlanSample> sorted_split(const std::vector<PlanSample>& samples) {
  std::vector<PlanSample> sorted = samples;
  std::sort(sorted.begin(), sorted.end(),
            [](const PlanSample& a, const PlanSample& b) { return a.index < b.index; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].n_frames < 1 || sorted[i].n_tokens < 0) {
      throw DataError("batch plan: sample " + std::to_string(sorted[i].index) + " has " +
                      std::to_string(sorted[i].n_frames) + " frames and " +
                      std::to_string(sorted[i].n_tokens) +
                      " tokens; the cache index is damaged: run `sluice cache verify`");
    }
    if (i > 0 && sorted[i].index == sorted[i - 1].index) {
      throw DataError("batch plan: sample " + std::to_string(sorted[i].index) +
                      " is listed twice in the training split");
    }
  }
  if (sorted.empty()) {
    throw ConfigError("the training split is empty: nothing to train on (check the cache and "
                      "train.validation_fraction)");
  }
  return sorted;
}

// The epoch's shuffle seed: (train.seed, epoch) as it always was, then each earlier segment of an
// elastic resume folded in (none: the seed of build()).
uint64_t epoch_seed(uint64_t seed, int64_t epoch, const std::vector<EpochSegment>& earlier) {
  uint64_t mixed = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch));
  for (const EpochSegment& segment : earlier) {
    mixed = splitmix64(mixed ^ static_cast<uint64_t>(segment.model_ranks));
    mixed = splitmix64(mixed ^ static_cast<uint64_t>(segment.steps));
  }
  return mixed;
}

}  // namespace

bool operator==(const MixtureCorpus& a, const MixtureCorpus& b) {
  return a.first_index == b.first_index && a.weight == b.weight;
}

const char* mixture_unit_name(MixtureUnit unit) {
  switch (unit) {
    case MixtureUnit::corpus: return "corpus";
    case MixtureUnit::language: return "language";
    case MixtureUnit::speaker: return "speaker";
  }
  return "?";
}

MixtureUnit parse_mixture_unit(const std::string& name) {
  for (MixtureUnit unit : {MixtureUnit::corpus, MixtureUnit::language, MixtureUnit::speaker}) {
    if (name == mixture_unit_name(unit)) return unit;
  }
  throw ConfigError("train.mixture_temperature_over = \"" + name +
                    "\": say what the temperature shares the epoch over: corpus (each cache of train.mixture, the "
                    "default), language or speaker");
}

std::vector<int64_t> mixture_cell_quotas(const std::vector<int64_t>& cell_samples, const std::vector<size_t>& cell_corpus,
                                         const std::vector<uint32_t>& cell_unit, const BatchPlanConfig& config) {
  const size_t n = cell_samples.size();
  std::vector<double> mass(n, 0.0);  // w_c x n_cell: samples per epoch at temperature 1
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    mass[i] = config.mixture.at(cell_corpus[i]).weight * static_cast<double>(cell_samples[i]);
    total += mass[i];
  }
  std::vector<double> share = mass;
  if (config.mixture_temperature != 1.0) {
    // The same samples per epoch in all, shared out over the units as M_u^a (a < 1 flattens the
    // mixture: a small unit is seen more often, as multilingual models sample their languages),
    // then within a unit over its cells as their masses.
    std::vector<uint32_t> units(cell_unit);
    std::sort(units.begin(), units.end());
    units.erase(std::unique(units.begin(), units.end()), units.end());
    const auto unit_at = [&](size_t i) {
      return static_cast<size_t>(std::lower_bound(units.begin(), units.end(), cell_unit[i]) - units.begin());
    };
    std::vector<double> unit_mass(units.size(), 0.0), unit_share(units.size(), 0.0);
    for (size_t i = 0; i < n; ++i) unit_mass[unit_at(i)] += mass[i];
    double tempered = 0.0;
    for (size_t u = 0; u < units.size(); ++u) {
      unit_share[u] = unit_mass[u] > 0.0 ? std::pow(unit_mass[u], config.mixture_temperature) : 0.0;
      tempered += unit_share[u];
    }
    for (size_t i = 0; i < n; ++i) {
      const size_t u = unit_at(i);
      share[i] = tempered > 0.0 && mass[i] > 0.0 ? total * unit_share[u] / tempered * (mass[i] / unit_mass[u]) : 0.0;
    }
  }
  std::vector<int64_t> quotas(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (share[i] > 1000.0 * static_cast<double>(cell_samples[i])) {
      const std::string what = config.mixture_unit == MixtureUnit::corpus
                                   ? "corpus " + std::to_string(cell_corpus[i])
                                   : std::string(mixture_unit_name(config.mixture_unit)) + " " + std::to_string(cell_unit[i]) +
                                         " of corpus " + std::to_string(cell_corpus[i]);
      throw ConfigError("train.mixture: " + what + " would be trained " +
                        std::to_string(share[i] / static_cast<double>(cell_samples[i])) +
                        " times per epoch (at most 1000): raise train.mixture_temperature or its weight");
    }
    quotas[i] = std::llround(share[i] * static_cast<double>(kMixtureQuotaUnit));
  }
  return quotas;
}

std::vector<int64_t> mixture_quotas(const std::vector<int64_t>& corpus_samples, const BatchPlanConfig& config) {
  std::vector<size_t> corpus(corpus_samples.size());
  std::iota(corpus.begin(), corpus.end(), size_t{0});
  const std::vector<uint32_t> unit(corpus.begin(), corpus.end());
  BatchPlanConfig by_corpus = config;
  by_corpus.mixture_unit = MixtureUnit::corpus;
  return mixture_cell_quotas(corpus_samples, corpus, unit, by_corpus);
}

// The owed copies of a mixture's epochs (see the header): one per cycle position of each cell in
// the epoch's range. A cell is a corpus, or one corpus's samples of one language or speaker.
struct BatchPlan::MixtureCounting {
  std::vector<std::vector<size_t>> cells;  // each cell's positions in the sorted split, ascending
  std::vector<size_t> cell_corpus;         // the corpus of each cell
  std::vector<uint32_t> cell_unit;         // the language, speaker or corpus each cell is tempered as
  std::vector<int64_t> quotas;             // mixture_cell_quotas()
  uint64_t seed = 0;
  std::vector<int32_t> bucket_of;  // bucket of each sorted position (whole_epoch())
  size_t n_buckets = 0;

  MixtureCounting(const std::vector<PlanSample>& sorted, const BatchPlanConfig& config) : seed(config.seed) {
    const auto at = [&](int64_t index) {
      return static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), index,
                                                  [](const PlanSample& s, int64_t i) { return s.index < i; }) -
                                 sorted.begin());
    };
    if (at(config.mixture.front().first_index) > 0) {
      internal_error("the mixture's first corpus begins at index " + std::to_string(config.mixture.front().first_index) +
                     ", after some of the split's samples");
    }
    for (size_t c = 0; c < config.mixture.size(); ++c) {
      const size_t first = at(config.mixture[c].first_index);
      const size_t end = c + 1 < config.mixture.size() ? at(config.mixture[c + 1].first_index) : sorted.size();
      if (config.mixture_unit == MixtureUnit::corpus) {
        std::vector<size_t> members(end - first);
        std::iota(members.begin(), members.end(), first);
        add_cell(c, static_cast<uint32_t>(c), std::move(members));
        continue;
      }
      std::map<uint32_t, std::vector<size_t>> by_unit;  // the corpus's cells in unit order
      for (size_t i = first; i < end; ++i) {
        by_unit[config.mixture_unit == MixtureUnit::language ? sorted[i].language : sorted[i].speaker].push_back(i);
      }
      for (auto& [unit, members] : by_unit) add_cell(c, unit, std::move(members));
    }
    std::vector<int64_t> sizes;
    for (const auto& members : cells) sizes.push_back(static_cast<int64_t>(members.size()));
    quotas = mixture_cell_quotas(sizes, cell_corpus, cell_unit, config);
  }

  void add_cell(size_t corpus, uint32_t unit, std::vector<size_t> members) {
    cells.push_back(std::move(members));
    cell_corpus.push_back(corpus);
    cell_unit.push_back(unit);
  }

  // floor(epoch x quota / unit) without overflow: the quota's whole samples and its fraction apart.
  static int64_t epoch_begin(int64_t epoch, int64_t quota) {
    return epoch * (quota / kMixtureQuotaUnit) + epoch * (quota % kMixtureQuotaUnit) / kMixtureQuotaUnit;
  }

  // Cycle `number` of cell c: its sorted positions in a permutation seeded from (seed, c, number),
  // shuffled as the plan shuffles (written out, the same everywhere). The latest cycle of each
  // cell is kept: epochs walk the cycles in order, so each is shuffled about once.
  std::shared_ptr<const std::vector<size_t>> cycle(size_t c, int64_t number) const {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (latest.size() != cells.size()) latest.assign(cells.size(), {-1, nullptr});
    if (latest[c].first == number) return latest[c].second;
    auto positions = std::make_shared<std::vector<size_t>>(cells[c]);
    std::mt19937_64 engine(splitmix64(splitmix64(splitmix64(seed ^ 0x6d69787475726531ULL) ^ c) ^
                                      static_cast<uint64_t>(number)));
    shuffle(*positions, engine);
    latest[c] = {number, positions};
    return positions;
  }

  // Every owed copy of `epoch`: visit(corpus, sorted position), cycle position k of each cell in
  // [epoch_begin(epoch), epoch_begin(epoch + 1)).
  template <typename Visit>
  void for_each_owed(int64_t epoch, Visit&& visit) const {
    for (size_t c = 0; c < cells.size(); ++c) {
      const auto n = static_cast<int64_t>(cells[c].size());
      if (n == 0) continue;
      const int64_t hi = epoch_begin(epoch + 1, quotas[c]);
      for (int64_t k = epoch_begin(epoch, quotas[c]); k < hi;) {
        const auto positions = cycle(c, k / n);
        const int64_t end = std::min(hi, (k / n + 1) * n);
        for (; k < end; ++k) visit(cell_corpus[c], (*positions)[static_cast<size_t>(k % n)]);
      }
    }
  }

  // Once the buckets are known: each cell's samples per bucket (a whole cycle's counts).
  void set_buckets(std::vector<int32_t> bucket_of_position, size_t buckets) {
    bucket_of = std::move(bucket_of_position);
    n_buckets = buckets;
    whole_cycle.assign(cells.size(), std::vector<int64_t>(buckets, 0));
    for (size_t c = 0; c < cells.size(); ++c) {
      for (size_t i : cells[c]) ++whole_cycle[c][static_cast<size_t>(bucket_of[i])];
    }
  }

  // The owed copies of `epoch` per bucket, without dealing them: a whole cycle adds its cell's
  // counts (O(buckets): PlanSchedule counts every epoch of a run this way), a part of one is
  // counted from its permutation.
  std::vector<int64_t> per_bucket(int64_t epoch) const {
    std::vector<int64_t> counts(n_buckets, 0);
    for (size_t c = 0; c < cells.size(); ++c) {
      const auto n = static_cast<int64_t>(cells[c].size());
      if (n == 0) continue;
      const int64_t hi = epoch_begin(epoch + 1, quotas[c]);
      for (int64_t k = epoch_begin(epoch, quotas[c]); k < hi;) {
        const int64_t end = std::min(hi, (k / n + 1) * n);
        if (k % n == 0 && end - k == n) {
          for (size_t b = 0; b < n_buckets; ++b) counts[b] += whole_cycle[c][b];
          k = end;
          continue;
        }
        const auto positions = cycle(c, k / n);
        for (; k < end; ++k) ++counts[static_cast<size_t>(bucket_of[(*positions)[static_cast<size_t>(k % n)]])];
      }
    }
    return counts;
  }

  std::vector<std::vector<int64_t>> whole_cycle;  // per cell, per bucket
  mutable std::mutex cache_mutex;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<size_t>>>> latest;
};

std::vector<MixtureUnitShare> mixture_unit_shares(const std::vector<PlanSample>& samples, const BatchPlanConfig& config) {
  if (config.mixture.empty()) return {};
  const BatchPlan::MixtureCounting counting(sorted_split(samples), config);
  std::map<uint32_t, MixtureUnitShare> by_unit;
  for (size_t c = 0; c < counting.cells.size(); ++c) {
    MixtureUnitShare& share = by_unit[counting.cell_unit[c]];
    share.unit = counting.cell_unit[c];
    share.quota += counting.quotas[c];
    share.samples += static_cast<int64_t>(counting.cells[c].size());
  }
  std::vector<MixtureUnitShare> shares;
  for (const auto& [unit, share] : by_unit) shares.push_back(share);
  return shares;
}

bool operator==(const EpochSegment& a, const EpochSegment& b) {
  return a.model_ranks == b.model_ranks && a.steps == b.steps;
}

namespace {

// `carried` (cache indices) as positions in the index-sorted split; an index not in it is a
// DataError (the checkpoint does not belong to this split).
std::vector<size_t> carried_positions(const std::vector<PlanSample>& sorted, const std::vector<int64_t>& carried) {
  std::vector<size_t> positions;
  positions.reserve(carried.size());
  for (int64_t index : carried) {
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), index,
                                     [](const PlanSample& s, int64_t i) { return s.index < i; });
    if (it == sorted.end() || it->index != index) {
      throw DataError("batch plan: sample " + std::to_string(index) +
                      " was carried from the epoch before but is not in the training split: the checkpoint "
                      "was made with another cache or split");
    }
    positions.push_back(static_cast<size_t>(it - sorted.begin()));
  }
  std::sort(positions.begin(), positions.end());
  return positions;
}

}  // namespace

BatchPlan BatchPlan::build(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                           int model_ranks, int64_t epoch, const std::vector<int64_t>& carried) {
  check_config(config, model_ranks);
  if (epoch < 0) internal_error("epoch " + std::to_string(epoch) + " is negative");
  const std::vector<PlanSample> sorted = sorted_split(samples);
  return deal(sorted, config, model_ranks, epoch, {}, carried_positions(sorted, carried), {});
}

BatchPlan BatchPlan::build_rest(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                int model_ranks, int64_t epoch, const std::vector<EpochSegment>& earlier,
                                const std::vector<int64_t>& carried) {
  check_config(config, model_ranks);
  if (epoch < 0) internal_error("epoch " + std::to_string(epoch) + " is negative");
  const std::vector<PlanSample> sorted = sorted_split(samples);
  const std::vector<size_t> carried_at = carried_positions(sorted, carried);
  std::vector<uint16_t> trained(sorted.size(), 0);  // copies trained, by position in `sorted`
  const auto position_of = [&](int64_t index) {
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), index,
                                     [](const PlanSample& s, int64_t i) { return s.index < i; });
    return static_cast<size_t>(it - sorted.begin());
  };
  // Replays the epoch's segments in order, counting what each trained.
  for (size_t i = 0; i < earlier.size(); ++i) {
    const EpochSegment& segment = earlier[i];
    check_config(config, segment.model_ranks);
    const std::vector<EpochSegment> before(earlier.begin(), earlier.begin() + static_cast<ptrdiff_t>(i));
    const BatchPlan plan = deal(sorted, config, segment.model_ranks, epoch, before, carried_at, trained);
    if (segment.steps < 0 || segment.steps > plan.steps()) {
      throw DataError("batch plan: epoch " + std::to_string(epoch) + " was resumed after " +
                      std::to_string(segment.steps) + " steps of " + std::to_string(segment.model_ranks) +
                      " model rank(s), but that plan has only " + std::to_string(plan.steps()) +
                      " steps: the checkpoint was made with another training split or settings");
    }
    for (int64_t step = 0; step < segment.steps; ++step) {
      for (int rank = 0; rank < segment.model_ranks; ++rank) {
        for (int64_t index : plan.batch(step, rank).samples) ++trained[position_of(index)];
      }
    }
  }
  BatchPlan rest = deal(sorted, config, model_ranks, epoch, earlier, carried_at, trained);
  rest.earlier_ = earlier;
  for (size_t i = 0; i < sorted.size(); ++i) {
    for (uint16_t t = 0; t < trained[i]; ++t) rest.trained_earlier_.push_back(sorted[i].index);
  }
  return rest;
}

std::string BatchPlan::fingerprint_of(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                      int model_ranks) {
  return plan_fingerprint(sorted_split(samples), config, model_ranks);
}

BatchPlan BatchPlan::deal(const std::vector<PlanSample>& sorted, const BatchPlanConfig& config, int model_ranks,
                          int64_t epoch, const std::vector<EpochSegment>& earlier, const std::vector<size_t>& carried,
                          const std::vector<uint16_t>& trained) {
  // The buckets and shapes of the whole split, so that a rest plan pads as the full one does.
  std::vector<Bucket> buckets = make_buckets(sorted, config, model_ranks);

  BatchPlan plan;
  plan.epoch_ = epoch;
  plan.model_ranks_ = model_ranks;
  plan.frame_budget_ = config.frame_budget;
  plan.fingerprint_ = plan_fingerprint(sorted, config, model_ranks);
  for (size_t position : carried) plan.carried_.push_back(sorted[position].index);

  // Copies owed: carried ones first (a trained copy pays a carried one before the epoch's own).
  std::vector<uint16_t> carried_owed(sorted.size(), 0);
  for (size_t position : carried) ++carried_owed[position];
  std::vector<uint16_t> own_owed(sorted.size(), 1);
  plan.owed_ = static_cast<int64_t>(sorted.size());
  if (!config.mixture.empty()) {
    auto counting = std::make_shared<MixtureCounting>(sorted, config);
    std::vector<int32_t> bucket_of(sorted.size(), 0);
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (size_t i : buckets[b].members) bucket_of[i] = static_cast<int32_t>(b);
    }
    counting->set_buckets(std::move(bucket_of), buckets.size());
    std::fill(own_owed.begin(), own_owed.end(), 0);
    plan.owed_per_corpus_.assign(config.mixture.size(), 0);
    counting->for_each_owed(epoch, [&](size_t corpus, size_t position) {
      ++own_owed[position];
      ++plan.owed_per_corpus_[corpus];
    });
    plan.owed_ = 0;
    for (int64_t n : plan.owed_per_corpus_) plan.owed_ += n;
    plan.split_per_bucket_ = counting->per_bucket(epoch);
    plan.mixture_ = std::move(counting);
  } else {
    for (const Bucket& bucket : buckets) plan.split_per_bucket_.push_back(bucket.shape.samples);
  }
  if (!trained.empty()) {
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (trained[i] > carried_owed[i] + own_owed[i]) {
        internal_error("sample " + std::to_string(sorted[i].index) + " was trained more often than it was owed");
      }
      const uint16_t paid = std::min(trained[i], carried_owed[i]);
      carried_owed[i] = static_cast<uint16_t>(carried_owed[i] - paid);
      own_owed[i] = static_cast<uint16_t>(own_owed[i] - (trained[i] - paid));
    }
  }

  std::mt19937_64 engine(epoch_seed(config.seed, epoch, earlier));
  struct Step {
    int32_t bucket;  // the shape (the tail step's is the entry after the last bucket)
    size_t source;   // into order
    size_t begin;    // into order[source]
  };
  std::vector<std::vector<int64_t>> order(buckets.size());
  std::vector<int64_t> spilled_in;  // from the shorter bucket, in its order
  std::vector<Step> steps;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    const bool last = b + 1 == buckets.size();
    if (last) {
      for (size_t position : carried) {
        if (carried_owed[position] > 0) {
          order[b].push_back(sorted[position].index);
          --carried_owed[position];
        }
      }
      shuffle(order[b], engine);
    }
    order[b].insert(order[b].end(), spilled_in.begin(), spilled_in.end());
    std::vector<int64_t> own;
    for (size_t i : bucket.members) {
      for (uint16_t copy = 0; copy < own_owed[i]; ++copy) own.push_back(sorted[i].index);
    }
    shuffle(own, engine);
    order[b].insert(order[b].end(), own.begin(), own.end());

    const int64_t group = step_size(bucket, model_ranks);
    bucket.shape.samples = static_cast<int64_t>(order[b].size());
    bucket.shape.steps = bucket.shape.samples / group;
    for (int64_t s = 0; s < bucket.shape.steps; ++s) {
      steps.push_back({static_cast<int32_t>(b), b, static_cast<size_t>(s * group)});
    }
    const size_t used = static_cast<size_t>(bucket.shape.steps * group);
    bucket.shape.spilled = static_cast<int64_t>(order[b].size() - used);
    spilled_in.assign(order[b].begin() + static_cast<ptrdiff_t>(used), order[b].end());
    plan.buckets_.push_back(bucket.shape);
  }
  // The last bucket's remainder: a tail step of B' per rank, the rest (< model_ranks) deferred.
  const size_t last = buckets.size() - 1;
  const auto tail_batch = static_cast<int32_t>(static_cast<int64_t>(spilled_in.size()) / model_ranks);
  const size_t tail_begin = order[last].size() - spilled_in.size();
  if (tail_batch > 0) {
    BucketShape tail = buckets[last].shape;
    tail.batch_size = tail_batch;
    tail.samples = int64_t{tail_batch} * model_ranks;
    tail.steps = 1;
    tail.spilled = 0;
    tail.tail = true;
    plan.buckets_.push_back(tail);
    steps.push_back({static_cast<int32_t>(plan.buckets_.size() - 1), last, tail_begin});
  }
  plan.deferred_.assign(order[last].begin() + static_cast<ptrdiff_t>(tail_begin + size_t(tail_batch) * size_t(model_ranks)),
                        order[last].end());
  shuffle(steps, engine);
  std::sort(plan.deferred_.begin(), plan.deferred_.end());

  plan.step_bucket_.reserve(steps.size());
  plan.batches_.reserve(steps.size() * static_cast<size_t>(model_ranks));
  for (const Step& step : steps) {
    plan.step_bucket_.push_back(step.bucket);
    const auto& source = order[step.source];
    const size_t batch = static_cast<size_t>(plan.buckets_[static_cast<size_t>(step.bucket)].batch_size);
    for (int rank = 0; rank < model_ranks; ++rank) {
      const auto first = source.begin() + static_cast<ptrdiff_t>(step.begin + static_cast<size_t>(rank) * batch);
      plan.batches_.push_back({step.bucket, std::vector<int64_t>(first, first + static_cast<ptrdiff_t>(batch))});
    }
  }
  return plan;
}

int64_t BatchPlan::spilled_samples() const {
  int64_t spilled = 0;
  for (size_t b = 0; b + 1 < split_per_bucket_.size(); ++b) spilled += buckets_[b].spilled;
  return spilled;
}

EpochCounts BatchPlan::whole_epoch(int64_t carried, int64_t epoch) const {
  // deal()'s arithmetic on counts: the same cuts, without the samples.
  // (A mixture's epochs owe other copies: the same buckets, that epoch's counts.)
  const std::vector<int64_t> per_bucket =
      mixture_ && epoch >= 0 && epoch != epoch_ ? mixture_->per_bucket(epoch) : split_per_bucket_;
  EpochCounts counts;
  int64_t spilled = 0;
  for (size_t b = 0; b < per_bucket.size(); ++b) {
    const int64_t group = int64_t{buckets_[b].batch_size} * model_ranks_;
    const int64_t pool = per_bucket[b] + spilled + (b + 1 == per_bucket.size() ? carried : 0);
    counts.steps += pool / group;
    spilled = pool % group;
  }
  const int64_t tail_batch = spilled / model_ranks_;
  counts.steps += tail_batch > 0 ? 1 : 0;
  counts.deferred = spilled - tail_batch * model_ranks_;
  return counts;
}

const PlannedBatch& BatchPlan::batch(int64_t step, int model_rank) const {
  if (step < 0 || step >= steps() || model_rank < 0 || model_rank >= model_ranks_) {
    internal_error("batch(step " + std::to_string(step) + ", model rank " +
                   std::to_string(model_rank) + ") is outside the plan of epoch " +
                   std::to_string(epoch_) + " (" + std::to_string(steps()) + " steps, " +
                   std::to_string(model_ranks_) + " model ranks)");
  }
  return batches_[static_cast<size_t>(step) * static_cast<size_t>(model_ranks_) +
                  static_cast<size_t>(model_rank)];
}

PlanPosition BatchPlan::next(PlanPosition at) const {
  if (at.epoch < 0 || at.step < 0 || at.step >= steps()) {
    internal_error("position (epoch " + std::to_string(at.epoch) + ", step " +
                   std::to_string(at.step) + ") is outside a plan of " + std::to_string(steps()) +
                   " steps per epoch");
  }
  if (at.step + 1 < steps()) return {at.epoch, at.step + 1};
  return {at.epoch + 1, 0};
}

std::string BatchPlan::summary() const {
  std::string out;
  char line[240];
  std::snprintf(line, sizeof line, "%6s %15s %8s %5s %9s %11s %9s\n", "bucket", "frames..F", "T", "B", "samples",
                "steps/epoch", "spilled");
  out += line;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketShape& s = buckets_[b];
    const bool over_budget = frame_budget_ > 0 && int64_t{s.batch_size} * s.max_frames > frame_budget_;
    const std::string name = s.tail ? "tail" : std::to_string(b);
    std::snprintf(line, sizeof line, "%6s %7d..%-6d %8d %5d %9lld %11lld %9s%s\n", name.c_str(), s.shortest_frames,
                  s.max_frames, s.max_tokens, s.batch_size, static_cast<long long>(s.samples),
                  static_cast<long long>(s.steps), s.tail ? "" : std::to_string(s.spilled).c_str(),
                  s.tail ? "  (the last bucket's remainder, fewer samples per rank)"
                         : over_budget ? "  (longer than train.frame_budget: B = 1)" : "");
    out += line;
  }
  int64_t split = 0;
  for (int64_t n : split_per_bucket_) split += n;
  std::snprintf(line, sizeof line,
                "%lld samples (%lld carried in from the epoch before), %lld global steps in epoch %lld for %d model "
                "rank(s), %lld spilled into a longer bucket, %lld deferred to the next epoch (%.2f%%)\n",
                static_cast<long long>(split), static_cast<long long>(carried_.size()),
                static_cast<long long>(steps()), static_cast<long long>(epoch_), model_ranks_,
                static_cast<long long>(spilled_samples()), static_cast<long long>(deferred_samples()),
                split > 0 ? 100.0 * static_cast<double>(deferred_samples()) / static_cast<double>(split) : 0.0);
  out += line;
  return out;
}

bool is_validation(const std::string& id, double fraction, uint64_t seed) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw ConfigError("train.validation_fraction = " + std::to_string(fraction) +
                      " must be between 0 and 1 (e.g. 0.02 for 2% of the samples)");
  }
  const uint64_t hash = XXH64(id.data(), id.size(), seed);
  // The top 53 bits as a double in [0, 1): exact, so the threshold is the same everywhere.
  const double u = static_cast<double>(hash >> 11) * 0x1.0p-53;
  return u < fraction;
}

SplitSamples split_samples(const std::vector<cache::IndexEntry>& entries, double fraction,
                           uint64_t seed) {
  SplitSamples split;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& entry = entries[i];
    const PlanSample sample{static_cast<int64_t>(i), entry.n_frames, entry.n_tokens, entry.language, entry.speaker};
    (is_validation(entry.id, fraction, seed) ? split.validation : split.train).push_back(sample);
  }
  return split;
}

}  // namespace sluice::runtime
