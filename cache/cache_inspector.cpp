#include "cache/cache_inspector.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <unordered_set>

#include "cache/cache_index.h"
#include "cache/shard_reader.h"
#include "common/error.h"
#include "common/printable.h"

namespace sluice::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Histogram make_histogram(const std::string& unit, double bin_width, size_t bins) {
  Histogram h;
  h.unit = unit;
  h.bin_width = bin_width;
  h.counts.assign(bins, 0);
  return h;
}

void add(Histogram& h, double value) {
  if (h.n == 0) {
    h.min = h.max = value;
  } else {
    h.min = std::min(h.min, value);
    h.max = std::max(h.max, value);
  }
  h.mean += (value - h.mean) / static_cast<double>(++h.n);
  const double bin = std::floor(value / h.bin_width);
  if (bin >= 0 && bin < static_cast<double>(h.counts.size())) {
    ++h.counts[static_cast<size_t>(bin)];
  } else if (bin >= 0) {
    ++h.overflow;
  } else {
    ++h.counts.front();  // negative values cannot happen for lengths; count them in the first bin
  }
}

int64_t vocabulary_size(const json& vocabulary) {
  if (vocabulary.is_array()) return static_cast<int64_t>(vocabulary.size());
  if (!vocabulary.is_object()) return -1;
  for (const char* key : {"tokens", "symbols"}) {
    auto it = vocabulary.find(key);
    if (it != vocabulary.end() && (it->is_array() || it->is_object())) {
      return static_cast<int64_t>(it->size());
    }
  }
  auto size = vocabulary.find("size");
  if (size != vocabulary.end() && size->is_number_integer()) return size->get<int64_t>();
  return -1;
}

std::vector<NameCount> count_names(const std::vector<std::string>& names,
                                   const std::vector<uint32_t>& codes,
                                   const std::vector<float>& seconds) {
  std::vector<NameCount> counts(names.size());
  for (size_t i = 0; i < names.size(); ++i) counts[i].name = names[i];
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < counts.size()) {
      ++counts[codes[i]].samples;
      counts[codes[i]].seconds += seconds[i];
    }
  }
  std::stable_sort(counts.begin(), counts.end(),
                   [](const NameCount& a, const NameCount& b) { return a.samples > b.samples; });
  return counts;
}

json histogram_json(const Histogram& h) {
  return {{"unit", h.unit},     {"bin_width", h.bin_width},
          {"counts", h.counts}, {"overflow", h.overflow},
          {"n", h.n},           {"min", h.min},
          {"max", h.max},       {"mean", h.mean}};
}

json names_json(const std::vector<NameCount>& counts) {
  json list = json::array();
  for (const NameCount& c : counts) {
    list.push_back({{"name", c.name}, {"samples", c.samples}, {"seconds", c.seconds}});
  }
  return list;
}

void histogram_text(std::ostringstream& out, const std::string& title, const Histogram& h) {
  out << title << " (n=" << h.n << ", min " << h.min << ", mean " << std::setprecision(4) << h.mean
      << ", max " << h.max << " " << h.unit << ")\n";
  int64_t peak = h.overflow;
  for (int64_t c : h.counts) peak = std::max(peak, c);
  size_t last = h.counts.size();
  while (last > 0 && h.counts[last - 1] == 0) --last;  // trailing empty bins say nothing
  auto bar = [&](int64_t count) {
    return std::string(peak > 0 ? static_cast<size_t>(40.0 * count / peak + 0.5) : 0, '#');
  };
  for (size_t i = 0; i < last; ++i) {
    out << "  [" << std::setw(6) << h.bin_width * i << ", " << std::setw(6) << h.bin_width * (i + 1)
        << ") " << std::setw(8) << h.counts[i] << " " << bar(h.counts[i]) << "\n";
  }
  if (h.overflow > 0) {
    out << "  >= " << std::setw(10) << h.bin_width * h.counts.size() << " " << std::setw(8)
        << h.overflow << " " << bar(h.overflow) << "\n";
  }
}

// One line: frames, and the range over bins of the mean and of the std.
void mel_statistics_text(std::ostringstream& out, const std::optional<MelStatistics>& stats) {
  if (!stats) {
    out << "  mel statistics: none (the cache was written before per-bin statistics existed; "
           "re-running `sluice prep` on it writes them)\n";
    return;
  }
  out << "  mel statistics: " << stats->frames << " frames, " << stats->mean.size() << " bins";
  if (!stats->mean.empty()) {
    const auto [mean_lo, mean_hi] = std::minmax_element(stats->mean.begin(), stats->mean.end());
    const auto [std_lo, std_hi] = std::minmax_element(stats->stddev.begin(), stats->stddev.end());
    out << std::setprecision(4) << ", mean " << *mean_lo << " .. " << *mean_hi << ", std "
        << *std_lo << " .. " << *std_hi << " (over bins)" << std::defaultfloat;
  }
  out << "\n";
}

std::string corpus_format_of(const json& settings) {
  if (!settings.is_object() || !settings.contains("corpus") || !settings["corpus"].is_object()) return "";
  for (const char* key : {"layout", "format"}) {
    const auto it = settings["corpus"].find(key);
    if (it != settings["corpus"].end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

}  // namespace

InspectResult inspect_cache(const fs::path& dir) {
  const Manifest manifest = Manifest::read(dir);
  const IndexColumns index = read_index(dir / manifest.index);
  InspectResult r;
  r.dir = dir;
  r.fingerprint = manifest.fingerprint;
  r.created = manifest.created;
  r.shards = static_cast<int64_t>(manifest.shards.size());
  r.n_mels = index.n_mels;
  r.totals = manifest.totals;
  r.mel_statistics = manifest.mel_statistics;
  r.frames = make_histogram("frames", 100, 20);
  r.tokens = make_histogram("tokens", 20, 20);
  r.seconds = make_histogram("s", 1.0, 20);
  for (int64_t i = 0; i < index.size(); ++i) {
    add(r.frames, index.n_frames[i]);
    add(r.tokens, index.n_tokens[i]);
    add(r.seconds, index.seconds[i]);
  }
  const std::vector<uint32_t> language_codes(index.language.begin(), index.language.end());
  r.corpus_format = corpus_format_of(manifest.settings);
  r.languages = count_names(manifest.languages, language_codes, index.seconds);
  r.speakers = count_names(manifest.speakers, index.speaker, index.seconds);

  std::unordered_set<int32_t> distinct;
  for (const ManifestShard& shard : manifest.shards) {
    ShardReader reader(dir / shard.file);
    for (int32_t id : reader.read_all_tokens()) distinct.insert(id);
  }
  VocabularyCoverage& v = r.vocabulary;
  v.vocabulary_size = vocabulary_size(manifest.vocabulary);
  v.distinct_ids = static_cast<int64_t>(distinct.size());
  bool first = true;
  for (int32_t id : distinct) {
    v.min_id = first ? id : std::min(v.min_id, id);
    v.max_id = first ? id : std::max(v.max_id, id);
    first = false;
    if (v.vocabulary_size >= 0) {
      (id >= 0 && id < v.vocabulary_size ? v.used_in_range : v.out_of_range) += 1;
    }
  }
  return r;
}

std::string InspectResult::to_text() const {
  std::ostringstream out;
  out << "cache " << dir.string() << "\n"
      << "  fingerprint " << fingerprint << ", created " << created << ", n_mels " << n_mels << "\n"
      << "  " << shards << " shards, " << totals.samples << " samples, " << totals.frames
      << " frames, " << totals.tokens << " tokens, " << std::fixed << std::setprecision(2)
      << totals.seconds / 3600.0 << " h of audio, " << totals.rejects << " rejected inputs\n";
  out << std::defaultfloat;
  mel_statistics_text(out, mel_statistics);
  histogram_text(out, "frames per sample", frames);
  histogram_text(out, "tokens per sample", tokens);
  histogram_text(out, "seconds per sample", seconds);
  auto names = [&](const char* title, const std::vector<NameCount>& counts) {
    out << title << " (" << counts.size() << ")\n";
    const size_t shown = std::min<size_t>(counts.size(), 20);
    for (size_t i = 0; i < shown; ++i) {
      out << "  " << std::left << std::setw(24) << printable(counts[i].name) << std::right << std::setw(8)
          << counts[i].samples << " samples " << std::fixed << std::setprecision(1) << std::setw(9)
          << counts[i].seconds / 60.0 << " min\n"
          << std::defaultfloat;
    }
    if (counts.size() > shown) out << "  ... " << counts.size() - shown << " more\n";
  };
  out << "corpus " << (corpus_format.empty() ? "(format not recorded)" : corpus_format) << ": "
      << languages.size() << " language(s), " << speakers.size() << " speaker(s)\n";
  names("languages", languages);
  names("speakers", speakers);
  out << "vocabulary: " << vocabulary.distinct_ids << " distinct token ids used (ids "
      << vocabulary.min_id << ".." << vocabulary.max_id << ")";
  if (vocabulary.vocabulary_size >= 0) {
    out << " of " << vocabulary.vocabulary_size << " in the vocabulary (" << std::fixed
        << std::setprecision(1)
        << (vocabulary.vocabulary_size > 0
                ? 100.0 * vocabulary.used_in_range / vocabulary.vocabulary_size
                : 0.0)
        << "% covered)" << std::defaultfloat;
    if (vocabulary.out_of_range > 0) {
      out << "; " << vocabulary.out_of_range
          << " ids are OUTSIDE the vocabulary: the tokenizer and the manifest's vocabulary "
             "disagree";
    }
  } else {
    out << " (the manifest's vocabulary gives no size)";
  }
  out << "\n";
  return out.str();
}

json InspectResult::to_json() const {
  json stats = nullptr;
  if (mel_statistics) {
    stats = {{"frames", mel_statistics->frames},
             {"mean", mel_statistics->mean},
             {"std", mel_statistics->stddev}};
  }
  return {{"dir", dir.string()},
          {"fingerprint", fingerprint},
          {"created", created},
          {"shards", shards},
          {"n_mels", n_mels},
          {"totals", totals.to_json()},
          {"histograms",
           {{"frames", histogram_json(frames)},
            {"tokens", histogram_json(tokens)},
            {"seconds", histogram_json(seconds)}}},
          {"corpus",
           {{"format", corpus_format},
            {"languages", static_cast<int64_t>(languages.size())},
            {"speakers", static_cast<int64_t>(speakers.size())}}},
          {"languages", names_json(languages)},
          {"speakers", names_json(speakers)},
          {"vocabulary",
           {{"vocabulary_size", vocabulary.vocabulary_size},
            {"distinct_ids", vocabulary.distinct_ids},
            {"used_in_range", vocabulary.used_in_range},
            {"out_of_range", vocabulary.out_of_range},
            {"min_id", vocabulary.min_id},
            {"max_id", vocabulary.max_id}}},
          {"mel_statistics", stats}};
}

}  // namespace sluice::cache
