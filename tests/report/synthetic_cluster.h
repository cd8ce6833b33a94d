#pragma once
// A cluster-sized train run made from a small one: the template's ranks (one data rank feeding
// its model ranks, as make_train_timelines or a real 3-rank run writes them) are cloned group by
// group into `ranks` ranks, each clone perturbed (every span's duration jittered, its clock skewed
// with the skew recorded as its offset), with one planted straggler model rank (its forward longer
// by a share of the step) and one planted slow data rank (its cache_read spans longer by a share
// of the step: a real run's reads take milliseconds, and a rule needs 5% of the step to call it). The
// ranks are written to RUN_DIR/timeline/rank-N.json one at a time, so making 4,096 of them needs
// the memory of one. Used by the report's scale test and by bench/report/make_synthetic_run.
//
// Layout: group g is ranks [g*G, g*G + G), G = 1 + the template's model ranks; its first rank is
// the data rank and feeds the others, on host "node-g". The ranks of a last partial group are model
// ranks on the last full group's node, fed by its data rank (which sends them nothing: their
// batch waits have no matching send, as with a lost message).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "timing/cpu_watch.h"
#include "timing/timeline_file.h"

namespace sluice::report::testing {

struct ClusterPlan {
  int ranks = 256;
  int straggler_rank = -1;         // a model rank; -1: none
  double straggler_share = 0.4;    // extra forward seconds, as a share of the template's median step
  int slow_data_rank = -1;         // a data rank; -1: none
  double slow_data_share = 0.3;    // each of its cache_read spans longer by this share of the median step
  // A host (group index: host "node-g") whose model ranks wait longer in the all-reduce: each of
  // their allreduce_exposed spans longer by this share of the median step; -1: none.
  int slow_host = -1;
  double slow_host_share = 0.1;
  double jitter = 0.02;            // +- share on every span's duration
  int64_t max_skew_ns = 2'000'000;  // +- clock skew per rank, recorded as its offset
  uint64_t seed = 1;
};

struct ClusterShape {
  int group_size = 0;
  int template_data_rank = -1;
  std::vector<int> template_models;  // template rank at group position 1, 2, ...
  int data_rank_of(int rank) const { return rank / group_size * group_size; }
  bool is_data(int rank) const { return rank % group_size == 0; }
};

inline ClusterShape cluster_shape(const std::vector<timing::RankTimeline>& tmpl) {
  ClusterShape shape;
  for (const auto& t : tmpl) {
    if (t.role == "data" && shape.template_data_rank < 0) {
      shape.template_data_rank = t.rank;
      shape.template_models = t.feeds;
    }
  }
  if (shape.template_data_rank < 0 || shape.template_models.empty()) {
    throw std::runtime_error("the template run has no data rank feeding model ranks (roles.data_per_node >= 1)");
  }
  shape.group_size = 1 + static_cast<int>(shape.template_models.size());
  return shape;
}

// A middle model rank and an early data rank of `plan.ranks`, so that neither is rank 0 or 1.
inline void plant_default_ranks(ClusterPlan& plan, const ClusterShape& shape) {
  const int groups = plan.ranks / shape.group_size;
  if (plan.straggler_rank < 0) plan.straggler_rank = (groups * 3 / 5) * shape.group_size + 1;
  if (plan.slow_data_rank < 0) plan.slow_data_rank = (groups / 3) * shape.group_size;
}

namespace detail {

inline double median_step_seconds(const timing::RankTimeline& model) {
  std::vector<int64_t> starts;
  for (const auto& s : model.spans) {
    if (s.stage == timing::Stage::batch_wait) starts.push_back(s.start_ns);
  }
  std::sort(starts.begin(), starts.end());
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < starts.size(); ++i) gaps.push_back(starts[i] - starts[i - 1]);
  if (gaps.empty()) return 0.1;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<long>(gaps.size() / 2), gaps.end());
  return static_cast<double>(gaps[gaps.size() / 2]) * 1e-9;
}

// The straggler: each step's forward longer by `extra_ns`; the spans after it in the step move
// later, the exposed all-reduce absorbing what it can (the others now wait less for... itself).
inline void plant_straggler(timing::RankTimeline& t, int64_t extra_ns) {
  std::map<int64_t, int64_t> forward_end;  // step -> original end of its forward
  for (auto& s : t.spans) {
    if (s.stage == timing::Stage::forward) {
      forward_end[s.step] = s.end_ns;
      s.end_ns += extra_ns;
    }
  }
  std::sort(t.spans.begin(), t.spans.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  std::map<int64_t, int64_t> carry;  // step -> shift still owed on the main lane
  for (auto& s : t.spans) {
    const auto end = forward_end.find(s.step);
    if (end == forward_end.end() || s.stage == timing::Stage::forward || s.start_ns < end->second) continue;
    if (s.lane != 0) {
      s.start_ns += extra_ns;
      s.end_ns += extra_ns;
      continue;
    }
    int64_t& owed = carry.try_emplace(s.step, extra_ns).first->second;
    const int64_t duration = s.end_ns - s.start_ns;
    s.start_ns += owed;
    const int64_t cut = s.stage == timing::Stage::allreduce_exposed ? std::min(owed, duration) : 0;
    s.end_ns = s.start_ns + duration - cut;
    owed -= cut;
  }
}

inline int map_rank(int template_rank, int group_base, const ClusterShape& shape) {
  if (template_rank == shape.template_data_rank) return group_base;
  const auto it = std::find(shape.template_models.begin(), shape.template_models.end(), template_rank);
  if (it == shape.template_models.end()) return -1;
  return group_base + 1 + static_cast<int>(it - shape.template_models.begin());
}

// Template rank -> cluster rank `rank`: identity, peers, channels; spans to ranks past the world
// are dropped.
inline timing::RankTimeline clone_for(const timing::RankTimeline& from, int rank, int world, const ClusterShape& shape,
                                      int base) {
  timing::RankTimeline t = from;
  const auto mapped = [&](int template_rank) {
    const int r = map_rank(template_rank, base, shape);
    return r < world ? r : -1;
  };
  t.rank = rank;
  t.world_size = world;
  t.host = "node-" + std::to_string(base / shape.group_size);
  t.gpu = rank == base ? -1 : rank - base - 1;
  t.fed_by = rank == base ? -1 : base;
  t.feeds.clear();
  for (int m : from.feeds) {
    if (mapped(m) >= 0) t.feeds.push_back(mapped(m));
  }
  std::vector<timing::Span> spans;
  spans.reserve(from.spans.size());
  for (timing::Span s : from.spans) {
    if (s.peer >= 0) {
      s.peer = mapped(s.peer);
      if (s.peer < 0) continue;
    }
    spans.push_back(s);
  }
  t.spans = std::move(spans);
  nlohmann::json channels = nlohmann::json::array();
  for (auto channel : from.channels) {
    const int peer = mapped(channel.value("peer", -1));
    if (peer < 0) continue;
    channel["peer"] = peer;
    const bool sends = channel.value("direction", "") == "send";
    channel["name"] = "feed " + std::to_string(sends ? rank : peer) + " -> " + std::to_string(sends ? peer : rank);
    channels.push_back(channel);
  }
  t.channels = channels;
  if (t.summary.is_object() && t.summary.contains("rank")) t.summary["rank"] = rank;
  return t;
}

// Every duration x (1 +- jitter); every local time + skew, the skew recorded in the offsets.
inline void perturb(timing::RankTimeline& t, double jitter, int64_t skew_ns, std::mt19937_64& random) {
  std::uniform_real_distribution<double> factor(1 - jitter, 1 + jitter);
  for (auto& s : t.spans) {
    const auto duration = static_cast<double>(s.end_ns - s.start_ns);
    s.start_ns += skew_ns;
    s.end_ns = s.start_ns + static_cast<int64_t>(duration * factor(random));
  }
  for (auto& c : t.counters) c.t_ns += skew_ns;
  t.clock.start.local_ns += skew_ns;
  t.clock.start.offset_ns += skew_ns;
  if (t.clock.end) {
    t.clock.end->local_ns += skew_ns;
    t.clock.end->offset_ns += skew_ns;
  }
  for (auto& [start, end] : t.stalls) {
    start += skew_ns;
    end += skew_ns;
  }
  for (auto& read : t.storage_reads) {
    read[0] += skew_ns;
    read[1] += skew_ns;
  }
}

}  // namespace detail

// The template run `times` times over, one copy after the other: every rank's spans, counter
// samples, stall and storage-read intervals repeated, each copy later by the run's duration and
// with its steps and channel sequence numbers after the previous copy's, so that a 300-step run
// becomes a 3,000-step one with the same per-step behaviour. Like CpuWatch, a rank keeps only its
// last CpuWatch::max_stalls stalls (and max_read_intervals storage reads), and says how many it
// dropped.
inline std::vector<timing::RankTimeline> stretch_template(std::vector<timing::RankTimeline> tmpl, int times) {
  if (times <= 1) return tmpl;
  int64_t first = INT64_MAX, last = INT64_MIN, steps = 0, sequences = 0;
  for (const auto& t : tmpl) {
    for (const auto& s : t.spans) {
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
      steps = std::max(steps, s.step + 1);
      sequences = std::max(sequences, s.sequence + 1);
    }
  }
  if (first > last) return tmpl;
  const int64_t period = last - first + 1'000'000;  // the run, and 1 ms between copies
  for (auto& t : tmpl) {
    const size_t spans = t.spans.size(), counters = t.counters.size();
    const size_t stalls = t.stalls.size(), reads = t.storage_reads.size();
    t.spans.reserve(spans * static_cast<size_t>(times));
    for (int c = 1; c < times; ++c) {
      const int64_t shift = c * period;
      for (size_t i = 0; i < spans; ++i) {
        timing::Span s = t.spans[i];
        s.start_ns += shift;
        s.end_ns += shift;
        if (s.step >= 0) s.step += c * steps;
        if (s.sequence >= 0) s.sequence += c * sequences;
        t.spans.push_back(s);
      }
      for (size_t i = 0; i < counters; ++i) {
        timing::CounterSample sample = t.counters[i];
        sample.t_ns += shift;
        t.counters.push_back(sample);
      }
      for (size_t i = 0; i < stalls; ++i) t.stalls.emplace_back(t.stalls[i].first + shift, t.stalls[i].second + shift);
      for (size_t i = 0; i < reads; ++i) {
        auto read = t.storage_reads[i];
        read[0] += shift;
        read[1] += shift;
        t.storage_reads.push_back(read);
      }
    }
    if (t.clock.end) t.clock.end->local_ns += (times - 1) * period;
    for (auto& channel : t.channels) {
      for (const char* key : {"batches", "bytes"}) {
        if (channel.contains(key) && channel[key].is_number()) channel[key] = channel[key].get<int64_t>() * times;
      }
    }
    if (t.resources.is_object()) {
      for (const char* key : {"wall_seconds", "cpu_user_seconds", "cpu_system_seconds", "stalled_seconds"}) {
        if (t.resources.contains(key) && t.resources[key].is_number()) {
          t.resources[key] = t.resources[key].get<double>() * times;
        }
      }
      if (t.resources.contains("stall_count") && t.resources["stall_count"].is_number()) {
        t.resources["stall_count"] = t.resources["stall_count"].get<int64_t>() * times;
      }
      if (t.stalls.size() > timing::CpuWatch::max_stalls) {
        const size_t dropped = t.stalls.size() - timing::CpuWatch::max_stalls;
        t.stalls.erase(t.stalls.begin(), t.stalls.begin() + static_cast<std::ptrdiff_t>(dropped));
        t.resources["stalls_dropped"] = t.resources.value("stalls_dropped", int64_t{0}) + static_cast<int64_t>(dropped);
      }
      if (t.storage_reads.size() > timing::CpuWatch::max_read_intervals) {
        const size_t dropped = t.storage_reads.size() - timing::CpuWatch::max_read_intervals;
        t.storage_reads.erase(t.storage_reads.begin(), t.storage_reads.begin() + static_cast<std::ptrdiff_t>(dropped));
      }
    }
  }
  return tmpl;
}

// Writes plan.ranks timelines under run_dir/timeline. `tmpl`: the template run's timelines.
inline void write_synthetic_cluster(const std::vector<timing::RankTimeline>& tmpl, const ClusterPlan& plan,
                                    const std::filesystem::path& run_dir) {
  const ClusterShape shape = cluster_shape(tmpl);
  std::map<int, const timing::RankTimeline*> by_rank;
  for (const auto& t : tmpl) by_rank[t.rank] = &t;
  const double step = detail::median_step_seconds(*by_rank.at(shape.template_models.front()));
  std::mt19937_64 random(plan.seed);
  std::uniform_int_distribution<int64_t> skew(-plan.max_skew_ns, plan.max_skew_ns);
  const int full = plan.ranks / shape.group_size * shape.group_size;
  const size_t models = shape.template_models.size();
  for (int rank = 0; rank < plan.ranks; ++rank) {
    const bool partial = rank >= full && full > 0;
    const int base = partial ? full - shape.group_size : shape.data_rank_of(rank);
    const int position = rank % shape.group_size;
    const int from = partial ? shape.template_models.at(static_cast<size_t>(rank - full) % models)
                     : position == 0 ? shape.template_data_rank
                                     : shape.template_models.at(static_cast<size_t>(position - 1));
    timing::RankTimeline t = detail::clone_for(*by_rank.at(from), rank, plan.ranks, shape, base);
    if (rank == plan.straggler_rank) detail::plant_straggler(t, static_cast<int64_t>(plan.straggler_share * step * 1e9));
    if (plan.slow_host >= 0 && base / shape.group_size == plan.slow_host && !shape.is_data(rank)) {
      for (auto& s : t.spans) {
        if (s.stage == timing::Stage::allreduce_exposed) s.start_ns -= static_cast<int64_t>(plan.slow_host_share * step * 1e9);
      }
    }
    if (rank == plan.slow_data_rank) {
      for (auto& s : t.spans) {
        if (s.stage == timing::Stage::cache_read) {
          s.start_ns -= static_cast<int64_t>(plan.slow_data_share * step * 1e9);
        }
      }
    }
    detail::perturb(t, plan.jitter, rank == 0 ? 0 : skew(random), random);
    timing::write_timeline(run_dir, t);
  }
}

}  // namespace sluice::report::testing
