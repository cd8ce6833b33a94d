#include "runtime/train/padding_summary.h"

#include <algorithm>
#include <unordered_map>

#include "common/error.h"
#include "common/file_util.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

double ratio(int64_t real, int64_t padded) {
  return padded > 0 ? static_cast<double>(real) / static_cast<double>(padded) : 1.0;
}

json shape_json(const BucketShape& b) {
  return {{"shortest_frames", b.shortest_frames}, {"max_frames", b.max_frames}, {"max_tokens", b.max_tokens},
          {"batch_size", b.batch_size}, {"tail", b.tail}};
}

}  // namespace

double PaddingFigures::frame_efficiency() const { return ratio(real_frames, padded_frames); }
double PaddingFigures::token_efficiency() const { return ratio(real_tokens, padded_tokens); }

void PaddingFigures::add(const PaddingFigures& o) {
  batches += o.batches;
  samples += o.samples;
  real_frames += o.real_frames;
  padded_frames += o.padded_frames;
  real_tokens += o.real_tokens;
  padded_tokens += o.padded_tokens;
}

json PaddingFigures::to_json() const {
  return {{"batches", batches},
          {"samples", samples},
          {"real_frames", real_frames},
          {"padded_frames", padded_frames},
          {"real_tokens", real_tokens},
          {"padded_tokens", padded_tokens},
          {"frame_efficiency", frame_efficiency()},
          {"token_efficiency", token_efficiency()}};
}

PaddingSummary summarize_padding(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                                 int model_ranks) {
  const BatchPlan plan = BatchPlan::build(samples, config, model_ranks, 0);
  std::unordered_map<int64_t, const PlanSample*> by_index;
  for (const auto& s : samples) by_index[s.index] = &s;
  PaddingSummary summary;
  summary.corpora.resize(config.mixture.size());
  const auto corpus_of = [&](int64_t index) {
    const auto after = std::upper_bound(config.mixture.begin(), config.mixture.end(), index,
                                        [](int64_t i, const MixtureCorpus& c) { return i < c.first_index; });
    return static_cast<size_t>(std::max<ptrdiff_t>(0, after - config.mixture.begin() - 1));
  };
  for (size_t b = 0; b < plan.buckets().size(); ++b) summary.buckets.push_back({static_cast<int>(b), plan.buckets()[b], {}});
  for (int64_t step = 0; step < plan.steps(); ++step) {
    for (int r = 0; r < model_ranks; ++r) {
      const PlannedBatch& batch = plan.batch(step, r);
      BucketPadding& bucket = summary.buckets.at(static_cast<size_t>(batch.bucket));
      PaddingFigures& f = bucket.figures;
      const auto n = static_cast<int64_t>(batch.samples.size());
      ++f.batches;
      f.samples += n;
      f.padded_frames += n * bucket.shape.max_frames;
      f.padded_tokens += n * bucket.shape.max_tokens;
      for (int64_t index : batch.samples) {
        const PlanSample& s = *by_index.at(index);
        f.real_frames += s.n_frames;
        f.real_tokens += s.n_tokens;
        if (!summary.corpora.empty()) {
          PaddingFigures& corpus = summary.corpora[corpus_of(index)];
          corpus.samples += 1;
          corpus.real_frames += s.n_frames;
          corpus.padded_frames += bucket.shape.max_frames;
          corpus.real_tokens += s.n_tokens;
          corpus.padded_tokens += bucket.shape.max_tokens;
        }
      }
    }
  }
  for (const auto& b : summary.buckets) summary.total.add(b.figures);
  summary.spilled = plan.spilled_samples();
  summary.deferred = plan.deferred_samples();
  return summary;
}

json mixture_units_json(const std::vector<PlanSample>& samples, const BatchPlanConfig& config,
                        const std::vector<std::string>& names, size_t shown) {
  if (config.mixture_unit == MixtureUnit::corpus || config.mixture.empty()) return nullptr;
  std::vector<MixtureUnitShare> shares = mixture_unit_shares(samples, config);
  std::stable_sort(shares.begin(), shares.end(),
                   [](const MixtureUnitShare& a, const MixtureUnitShare& b) { return a.quota > b.quota; });
  const auto per_epoch = [](int64_t quota) { return static_cast<double>(quota) / static_cast<double>(kMixtureQuotaUnit); };
  json units = json::array();
  int64_t other_quota = 0, other_samples = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    const MixtureUnitShare& share = shares[i];
    if (i >= shown) {
      other_quota += share.quota;
      other_samples += share.samples;
      continue;
    }
    units.push_back({{"unit", share.unit},
                     {"name", share.unit < names.size() ? names[share.unit] : std::to_string(share.unit)},
                     {"samples", share.samples},
                     {"per_epoch", per_epoch(share.quota)}});
  }
  json document = {{"over", mixture_unit_name(config.mixture_unit)},
                   {"temperature", config.mixture_temperature},
                   {"units", units}};
  if (shares.size() > shown) {
    document["others"] = {{"units", shares.size() - shown}, {"samples", other_samples}, {"per_epoch", per_epoch(other_quota)}};
  }
  return document;
}

json padding_json(const std::vector<PlanSample>& samples, const BatchPlanConfig& config, int model_ranks,
                  int64_t deferred_past_end, const std::vector<std::string>& corpus_dirs,
                  const std::vector<std::string>& unit_names) {
  const PaddingSummary now = summarize_padding(samples, config, model_ranks);
  json corpora = json::array();
  PaddingFigures all;
  for (const PaddingFigures& corpus : now.corpora) all.add(corpus);
  const auto share = [](int64_t part, int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  for (size_t c = 0; c < now.corpora.size(); ++c) {
    const PaddingFigures& f = now.corpora[c];
    json row = f.to_json();
    row.erase("batches");
    row["corpus"] = c;
    row["dir"] = c < corpus_dirs.size() ? corpus_dirs[c] : std::string();
    row["weight"] = config.mixture[c].weight;
    row["padding_frames"] = f.padded_frames - f.real_frames;
    row["sample_share"] = share(f.samples, all.samples);
    row["padding_share"] = share(f.padded_frames - f.real_frames, all.padded_frames - all.real_frames);
    row["frame_share"] = share(f.real_frames, all.real_frames);
    corpora.push_back(row);
  }
  json buckets = json::array();
  for (const auto& b : now.buckets) {
    json row = shape_json(b.shape);
    row.update(b.figures.to_json());
    row["bucket"] = b.bucket;
    buckets.push_back(row);
  }
  json alternatives = json::array();
  if (config.bucket_edges.empty()) {
    for (int factor : {2, 4}) {
      BatchPlanConfig more = config;
      more.n_buckets = config.n_buckets * factor;
      try {
        const PaddingSummary alt = summarize_padding(samples, more, model_ranks);
        // Padded frames per real frame, today against the alternative.
        const double saved = 1.0 - now.total.frame_efficiency() / alt.total.frame_efficiency();
        alternatives.push_back({{"n_buckets", more.n_buckets},
                                {"buckets", alt.buckets.size()},
                                {"frame_efficiency", alt.total.frame_efficiency()},
                                {"token_efficiency", alt.total.token_efficiency()},
                                {"padded_frames_saved_fraction", saved}});
      } catch (const Error&) {
        // That many buckets cannot make a plan for this split (too few samples): no alternative.
      }
    }
  }
  json remainder = {{"spilled", now.spilled}, {"deferred", now.deferred}};
  if (deferred_past_end >= 0) remainder["deferred_past_end"] = deferred_past_end;
  json document = {{"format", padding_format},
          {"model_ranks", model_ranks},
          {"n_buckets", config.n_buckets},
          {"bucket_edges", config.bucket_edges},
          {"batch_size", config.batch_size},
          {"frame_budget", config.frame_budget},
          {"pad_multiple", config.pad_multiple},
          {"buckets", buckets},
          {"total", now.total.to_json()},
          {"alternatives", alternatives},
          {"remainder", remainder}};
  if (!corpora.empty()) document["corpora"] = corpora;
  const json units = mixture_units_json(samples, config, unit_names);
  if (!units.is_null()) document["mixture_units"] = units;
  return document;
}

void write_padding_summary(const std::filesystem::path& run_dir, const std::vector<PlanSample>& samples,
                           const BatchPlanConfig& config, int model_ranks, int64_t deferred_past_end,
                           const std::vector<std::string>& corpus_dirs, const std::vector<std::string>& unit_names) {
  write_file_atomically(run_dir / "padding.json",
                        padding_json(samples, config, model_ranks, deferred_past_end, corpus_dirs, unit_names).dump(2) +
                            "\n");
}

}  // namespace sluice::runtime
