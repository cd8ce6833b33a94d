#include "cache/cache_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "cache/cache_index.h"
#include "cache/hdf5_handle.h"
#include "cache/manifest.h"
#include "cache/shard_reader.h"
#include "common/error.h"

namespace sluice::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string verify_advice(const fs::path& dir) {
  return "run `sluice cache verify " + dir.string() +
         "` to list what is damaged, then rebuild the cache with `sluice prep`";
}

// Every shard the manifest lists is there with the size it had when the cache was finished: a
// missing, truncated or grown shard is named now (one stat per shard), not when a run first reads
// it, possibly hours later. Content damage of the same size is the checksums' job (read time and
// `sluice cache verify`).
void check_shard_files(const fs::path& dir, const std::vector<ManifestShard>& shards) {
  for (const ManifestShard& shard : shards) {
    const fs::path path = dir / shard.file;
    std::error_code error;
    const auto bytes = fs::file_size(path, error);
    if (error) {
      throw CacheError("shard " + path.string() + " listed in " + (dir / Manifest::file_name).string() +
                       (error == std::errc::no_such_file_or_directory ? " is missing" : " cannot be read: " + error.message()) +
                       "; rerun `sluice prep` with the same settings to rebuild it (it keeps the other shards), "
                       "or run `sluice cache verify " + dir.string() + "` to list every problem");
    }
    if (static_cast<int64_t>(bytes) != shard.bytes) {
      throw CacheError("shard " + path.string() + " has " + std::to_string(bytes) + " bytes, but the manifest says " +
                       std::to_string(shard.bytes) + ": it was " + (static_cast<int64_t>(bytes) < shard.bytes ? "truncated or replaced" : "changed or replaced") +
                       " after the cache was built; " + verify_advice(dir));
    }
  }
}

}  // namespace

struct CacheReader::State {
  struct ShardSlot {
    fs::path path;
    int64_t samples = 0;
    std::unique_ptr<ShardReader> reader;  // opened on first use
  };

  fs::path dir;
  nlohmann::json manifest_json;
  std::string fingerprint;
  int32_t n_mels = 0;
  int64_t chunk_cache_bytes = -1;
  std::optional<MelStatistics> mel_statistics;  // from the manifest; absent in older caches
  std::vector<IndexEntry> entries;
  std::vector<ShardSlot> slots;
  std::vector<int32_t> slot_of_shard;  // shard number -> slots position, -1 when not listed
  std::vector<int32_t> run_tokens;     // scratch for multi-row token reads
  // open_mixture(): the caches, each a reader of its own, and where each one's indices begin.
  std::vector<CacheReader> parts;
  std::vector<int64_t> first_index;
  // The unified languages and speakers (open(): the manifest's), and each speaker's corpus.
  std::vector<std::string> languages, speakers;
  std::vector<uint32_t> speaker_starts;  // each corpus's first unified speaker

  void check_index(int64_t index) const {
    if (index < 0 || index >= static_cast<int64_t>(entries.size())) {
      throw CacheError("sample index " + std::to_string(index) + " is out of range: the cache " +
                       dir.string() + " holds " + std::to_string(entries.size()) + " samples");
    }
  }

  std::string describe(int64_t index) const {
    const IndexEntry& e = entries[static_cast<size_t>(index)];
    return "sample '" + e.id + "' (cache index " + std::to_string(index) + ", " +
           shard_file_name(e.shard) + " row " + std::to_string(e.row) + ")";
  }

  ShardReader& shard(const IndexEntry& e) {
    ShardSlot& slot = slots[static_cast<size_t>(slot_of_shard[e.shard])];
    if (slot.reader) return *slot.reader;
    std::unique_ptr<ShardReader> reader;
    try {
      reader = std::make_unique<ShardReader>(slot.path, chunk_cache_bytes);
    } catch (const CacheError& error) {
      throw CacheError("cannot open " + slot.path.string() + " (needed for sample '" + e.id +
                       "'): " + error.what() + "; " + verify_advice(dir));
    }
    const ShardInfo& info = reader->info();
    if (info.fingerprint != fingerprint || info.n_mels != n_mels ||
        reader->size() != slot.samples) {
      throw CacheError(slot.path.string() + " does not belong to this cache (fingerprint " +
                       info.fingerprint + ", n_mels " + std::to_string(info.n_mels) + ", " +
                       std::to_string(reader->size()) + " samples; the manifest says " +
                       fingerprint + ", " + std::to_string(n_mels) + ", " +
                       std::to_string(slot.samples) +
                       "): it was replaced after the cache was "
                       "built; " +
                       verify_advice(dir));
    }
    slot.reader = std::move(reader);
    return *slot.reader;
  }

  // Reads rows [first_row, last_row] of one shard for the samples at positions order[begin, end)
  // of `indices` (all in that row range, sorted by row).
  void read_run(const std::vector<int64_t>& indices, const std::vector<size_t>& order, size_t begin,
                size_t end, std::vector<Sample>& out) {
    const IndexEntry& head = entries[static_cast<size_t>(indices[order[begin]])];
    ShardReader& reader = shard(head);
    const int64_t first_row = head.row;
    const int64_t last_row = entries[static_cast<size_t>(indices[order[end - 1]])].row;
    const int64_t rows = last_row - first_row + 1;
    const std::vector<int64_t>& mel_offsets = reader.mel_offsets();
    const std::vector<int64_t>& token_offsets = reader.token_offsets();

    for (size_t k = begin; k < end; ++k) {
      const int64_t index = indices[order[k]];
      const IndexEntry& e = entries[static_cast<size_t>(index)];
      const int64_t frames = mel_offsets[e.row + 1] - mel_offsets[e.row];
      const int64_t tokens = token_offsets[e.row + 1] - token_offsets[e.row];
      if (frames != e.n_frames || tokens != e.n_tokens) {
        throw CacheError("the index and " + reader.info().path.string() + " disagree on " +
                         describe(index) + ": index says " + std::to_string(e.n_frames) +
                         " frames / " + std::to_string(e.n_tokens) + " tokens, the shard " +
                         std::to_string(frames) + " / " + std::to_string(tokens) + "; " +
                         verify_advice(dir));
      }
      Sample& sample = out[order[k]];
      sample.index = index;
      sample.id = e.id;
      sample.n_frames = e.n_frames;
      sample.n_mels = n_mels;
    }

    try {
      // Frames go straight from each verified chunk into the samples' own vectors (reserved, so
      // appending neither reallocates nor zero-fills first). Every row in [first_row, last_row]
      // is requested (runs are built that way); a row requested twice is filled once and copied.
      std::vector<size_t> targets;  // out[] position of each distinct row, in row order
      int64_t previous_row = -1;
      for (size_t k = begin; k < end; ++k) {
        const int64_t row = entries[static_cast<size_t>(indices[order[k]])].row;
        if (row == previous_row) continue;
        previous_row = row;
        targets.push_back(order[k]);
        Sample& sample = out[order[k]];
        sample.mel.clear();
        sample.mel.reserve(static_cast<size_t>(sample.n_frames) * static_cast<size_t>(n_mels));
      }
      size_t current = 0;
      reader.read_mel_pieces(first_row, rows, [&](const float* frames, int64_t n_frames) {
        const float* data = frames;
        size_t values = static_cast<size_t>(n_frames) * static_cast<size_t>(n_mels);
        while (values > 0) {
          while (current < targets.size() &&
                 out[targets[current]].mel.size() ==
                     static_cast<size_t>(out[targets[current]].n_frames) * n_mels) {
            ++current;
          }
          if (current == targets.size()) {
            throw CacheError("internal error: " + reader.info().path.string() +
                             " returned more frames than its offsets promise");
          }
          std::vector<float>& mel = out[targets[current]].mel;
          const size_t take = std::min(
              values, static_cast<size_t>(out[targets[current]].n_frames) * n_mels - mel.size());
          mel.insert(mel.end(), data, data + take);
          data += take;
          values -= take;
        }
      });
      const int64_t token_base = token_offsets[first_row];
      run_tokens.resize(static_cast<size_t>(token_offsets[last_row + 1] - token_base));
      reader.read_tokens(first_row, rows, run_tokens.data());
      previous_row = -1;
      size_t source = 0;
      for (size_t k = begin; k < end; ++k) {
        Sample& sample = out[order[k]];
        const int64_t row = entries[static_cast<size_t>(sample.index)].row;
        const int32_t* tokens = run_tokens.data() + (token_offsets[row] - token_base);
        sample.tokens.assign(tokens, tokens + (token_offsets[row + 1] - token_offsets[row]));
        if (row != previous_row) {
          previous_row = row;
          source = order[k];
        } else {
          sample.mel = out[source].mel;  // the same row requested again
        }
      }
    } catch (const CacheError& error) {
      if (rows > 1) {
        // Find the damaged row: read the run's samples one at a time; the first one that fails
        // is named in the error.
        for (size_t k = begin; k < end; ++k) read_run(indices, order, k, k + 1, out);
      }
      const int64_t index = indices[order[begin]];
      throw CacheError("cannot read " + describe(index) + " from " + reader.info().path.string() +
                       ": " + error.what() + "; " + verify_advice(dir));
    }
  }
};

CacheReader::CacheReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
CacheReader::CacheReader(CacheReader&&) noexcept = default;
CacheReader& CacheReader::operator=(CacheReader&&) noexcept = default;
CacheReader::~CacheReader() = default;

CacheReader CacheReader::open(const fs::path& dir, int64_t chunk_cache_bytes) {
  auto state = std::make_unique<State>();
  State& s = *state;
  s.dir = dir;
  s.chunk_cache_bytes = chunk_cache_bytes;
  Manifest manifest = Manifest::read(dir);
  s.manifest_json = manifest.to_json();
  s.fingerprint = manifest.fingerprint;

  const fs::path index_path = dir / manifest.index;
  IndexColumns index = read_index(index_path);
  if (index.fingerprint != manifest.fingerprint || index.size() != manifest.totals.samples) {
    throw CacheError(index_path.string() + " does not match " +
                     (dir / Manifest::file_name).string() + " (fingerprint " + index.fingerprint +
                     " vs " + manifest.fingerprint + ", " + std::to_string(index.size()) + " vs " +
                     std::to_string(manifest.totals.samples) + " samples); " + verify_advice(dir));
  }
  s.n_mels = static_cast<int32_t>(index.n_mels);
  if (manifest.mel_statistics && static_cast<int64_t>(manifest.mel_statistics->mean.size()) !=
                                     index.n_mels) {
    throw CacheError((dir / Manifest::file_name).string() + " has mel_statistics for " +
                     std::to_string(manifest.mel_statistics->mean.size()) +
                     " mel bins, but the cache's n_mels is " + std::to_string(index.n_mels) +
                     "; " + verify_advice(dir));
  }
  s.mel_statistics = std::move(manifest.mel_statistics);

  int64_t max_shard = -1;
  for (const ManifestShard& shard : manifest.shards) max_shard = std::max(max_shard, shard.shard);
  s.slot_of_shard.assign(static_cast<size_t>(max_shard + 1), -1);
  for (const ManifestShard& shard : manifest.shards) {
    s.slot_of_shard[static_cast<size_t>(shard.shard)] = static_cast<int32_t>(s.slots.size());
    s.slots.push_back({dir / shard.file, shard.samples, nullptr});
  }
  check_shard_files(dir, manifest.shards);

  const size_t n = static_cast<size_t>(index.size());
  s.entries.resize(n);
  for (size_t i = 0; i < n; ++i) {
    IndexEntry& e = s.entries[i];
    e.shard = index.shard[i];
    e.row = index.row[i];
    e.n_frames = index.n_frames[i];
    e.n_tokens = index.n_tokens[i];
    e.seconds = index.seconds[i];
    e.language = index.language[i];
    e.speaker = index.speaker[i];
    e.id = std::move(index.ids[i]);
    const bool listed = e.shard < s.slot_of_shard.size() && s.slot_of_shard[e.shard] >= 0;
    if (!listed || e.row >= s.slots[static_cast<size_t>(s.slot_of_shard[e.shard])].samples ||
        e.language >= manifest.languages.size() || e.speaker >= manifest.speakers.size()) {
      throw CacheError(index_path.string() + " row " + std::to_string(i) + " (sample '" + e.id +
                       "') points outside the manifest's shards, languages or speakers; " +
                       verify_advice(dir));
    }
  }
  s.languages = manifest.languages;
  s.speakers = manifest.speakers;
  s.speaker_starts = {0};
  return CacheReader(std::move(state));
}

namespace {

// The settings of a manifest that make its features: what a mixture's caches must share.
json feature_settings_of(const json& manifest) {
  json settings = json::object();
  const json recorded = manifest.value("settings", json::object());
  for (const char* section : {"features", "text"}) {
    if (recorded.is_object() && recorded.contains(section) && recorded[section].is_object()) {
      for (const auto& [name, value] : recorded[section].items()) settings[std::string(section) + "." + name] = value;
    }
  }
  settings["cache.mel_dtype"] = manifest.value("mel_dtype", std::string("float32"));
  const json vocabulary = manifest.value("vocabulary", json::object());
  if (vocabulary.is_object()) {
    settings["vocabulary.version"] = vocabulary.value("version", json());
    settings["vocabulary.symbols"] = vocabulary.value("symbols", json());
  }
  return settings;
}

bool same_setting(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();  // 8000 and 8000.0
  return a == b;
}

void check_same_features(const CacheReader& first, const CacheReader& other) {
  const json mine = feature_settings_of(first.manifest());
  const json theirs = feature_settings_of(other.manifest());
  std::vector<std::string> keys;
  for (const auto& [key, value] : mine.items()) keys.push_back(key);
  for (const auto& [key, value] : theirs.items()) {
    if (!mine.contains(key)) keys.push_back(key);
  }
  std::string differences;
  for (const std::string& key : keys) {
    const json a = mine.value(key, json());
    const json b = theirs.value(key, json());
    if (same_setting(a, b)) continue;
    const auto shown = [&](const json& v) {
      const std::string text = v.dump();
      return key == "vocabulary.symbols" ? std::to_string(v.is_array() ? v.size() : 0) + " symbols" + (text.size() < 80 ? " " + text : "") : text;
    };
    differences += "\n  " + key + ": " + shown(a) + " in " + first.dir().string() + ", " + shown(b) + " in " +
                   other.dir().string();
  }
  if (first.n_mels() != other.n_mels() && differences.find("n_mels") == std::string::npos) {
    differences += "\n  n_mels: " + std::to_string(first.n_mels()) + " in " + first.dir().string() + ", " +
                   std::to_string(other.n_mels()) + " in " + other.dir().string();
  }
  if (differences.empty()) return;
  throw ConfigError("train.mixture: the caches " + first.dir().string() + " and " + other.dir().string() +
                    " were prepared with different features, and one model trains on one kind:" + differences +
                    "\nrun `sluice prep` on the second corpus with the first cache's settings (its manifest.json "
                    "\"settings\") into a new cache directory, and mix that one");
}

}  // namespace

CacheReader CacheReader::open_mixture(const std::vector<fs::path>& dirs, int64_t chunk_cache_bytes) {
  if (dirs.empty()) throw ConfigError("train.mixture names no cache: give \"DIR:WEIGHT, DIR:WEIGHT, ...\"");
  auto state = std::make_unique<State>();
  State& s = *state;
  for (const fs::path& dir : dirs) {
    CacheReader part = open(dir, chunk_cache_bytes);
    if (!s.parts.empty()) check_same_features(s.parts.front(), part);
    s.first_index.push_back(static_cast<int64_t>(s.entries.size()));
    s.entries.insert(s.entries.end(), part.entries().begin(), part.entries().end());
    s.parts.push_back(std::move(part));
  }
  // One language table (codes are global, so the union of the caches'), one speaker table (the
  // caches' one after the other: a speaker is its corpus's); entries point into both.
  for (const CacheReader& part : s.parts) s.languages.insert(s.languages.end(), part.languages().begin(), part.languages().end());
  std::sort(s.languages.begin(), s.languages.end());
  s.languages.erase(std::unique(s.languages.begin(), s.languages.end()), s.languages.end());
  if (s.languages.size() > std::numeric_limits<uint16_t>::max()) {
    throw CacheError("train.mixture: the caches hold " + std::to_string(s.languages.size()) +
                     " languages together, more than an index row's 16-bit language field holds");
  }
  for (size_t c = 0; c < s.parts.size(); ++c) {
    const CacheReader& part = s.parts[c];
    std::vector<uint16_t> language_of(part.languages().size());
    for (size_t l = 0; l < language_of.size(); ++l) {
      language_of[l] = static_cast<uint16_t>(
          std::lower_bound(s.languages.begin(), s.languages.end(), part.languages()[l]) - s.languages.begin());
    }
    const auto speaker_start = static_cast<uint32_t>(s.speakers.size());
    s.speaker_starts.push_back(speaker_start);
    s.speakers.insert(s.speakers.end(), part.speakers().begin(), part.speakers().end());
    const auto end = static_cast<size_t>(c + 1 < s.parts.size() ? s.first_index[c + 1] : static_cast<int64_t>(s.entries.size()));
    for (auto i = static_cast<size_t>(s.first_index[c]); i < end; ++i) {
      s.entries[i].language = language_of[s.entries[i].language];
      s.entries[i].speaker += speaker_start;
    }
  }
  const CacheReader& first = s.parts.front();
  s.dir = first.dir();
  s.n_mels = first.n_mels();
  s.manifest_json = first.manifest();
  json mixture = json::array();
  for (const CacheReader& part : s.parts) {
    mixture.push_back({{"dir", part.dir().string()},
                       {"fingerprint", part.manifest().value("fingerprint", std::string())},
                       {"samples", part.size()},
                       {"shard_count", part.manifest().value("shards", json::array()).size()}});
  }
  s.manifest_json["mixture"] = mixture;
  // Pooled statistics: every frame of every cache counts once (mean and second moment, weighted).
  int64_t total_frames = 0;
  std::vector<double> mean(static_cast<size_t>(s.n_mels), 0.0), square(static_cast<size_t>(s.n_mels), 0.0);
  bool all = true;
  for (const CacheReader& part : s.parts) {
    const MelStatistics* stats = part.mel_statistics();
    if (stats == nullptr) {
      all = false;
      break;
    }
    const auto frames = static_cast<double>(stats->frames);
    for (size_t b = 0; b < mean.size(); ++b) {
      mean[b] += frames * stats->mean[b];
      square[b] += frames * (double{stats->stddev[b]} * stats->stddev[b] + double{stats->mean[b]} * stats->mean[b]);
    }
    total_frames += stats->frames;
  }
  if (all && total_frames > 0) {
    MelStatistics pooled = *first.mel_statistics();
    pooled.frames = total_frames;
    for (size_t b = 0; b < mean.size(); ++b) {
      const double m = mean[b] / static_cast<double>(total_frames);
      pooled.mean[b] = static_cast<float>(m);
      pooled.stddev[b] = static_cast<float>(std::sqrt(std::max(0.0, square[b] / static_cast<double>(total_frames) - m * m)));
    }
    s.mel_statistics = std::move(pooled);
  }
  return CacheReader(std::move(state));
}

size_t CacheReader::corpora() const { return state_->parts.empty() ? 1 : state_->parts.size(); }
int64_t CacheReader::first_index(size_t corpus) const {
  return state_->parts.empty() ? 0 : state_->first_index.at(corpus);
}
const fs::path& CacheReader::corpus_dir(size_t corpus) const {
  return state_->parts.empty() ? state_->dir : state_->parts.at(corpus).dir();
}
size_t CacheReader::corpus_of(int64_t index) const {
  const auto& starts = state_->first_index;
  if (starts.empty()) return 0;
  return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), index) - starts.begin()) - 1;
}

const std::vector<std::string>& CacheReader::languages() const { return state_->languages; }
const std::vector<std::string>& CacheReader::speakers() const { return state_->speakers; }
size_t CacheReader::speaker_corpus(uint32_t speaker) const {
  const auto& starts = state_->speaker_starts;
  return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), speaker) - starts.begin()) - 1;
}

int64_t CacheReader::size() const { return static_cast<int64_t>(state_->entries.size()); }

const IndexEntry& CacheReader::entry(int64_t index) const {
  state_->check_index(index);
  return state_->entries[static_cast<size_t>(index)];
}

const std::vector<IndexEntry>& CacheReader::entries() const { return state_->entries; }
const nlohmann::json& CacheReader::manifest() const { return state_->manifest_json; }
const fs::path& CacheReader::dir() const { return state_->dir; }
int32_t CacheReader::n_mels() const { return state_->n_mels; }
const MelStatistics* CacheReader::mel_statistics() const {
  return state_->mel_statistics ? &*state_->mel_statistics : nullptr;
}

Sample CacheReader::read(int64_t index) {
  std::vector<Sample> samples = read_batch({index});
  return std::move(samples.front());
}

std::vector<Sample> CacheReader::read_batch(const std::vector<int64_t>& indices) {
  std::vector<Sample> out;
  read_batch(indices, out);
  return out;
}

void CacheReader::read_batch(const std::vector<int64_t>& indices, std::vector<Sample>& out) {
  State& s = *state_;
  for (int64_t index : indices) s.check_index(index);
  if (!s.parts.empty()) {
    // A mixture: each cache reads its own samples (its own lock-held runs), then back in order.
    out.resize(indices.size());
    std::vector<int64_t> local;
    std::vector<size_t> where;
    std::vector<Sample> read;
    for (size_t c = 0; c < s.parts.size(); ++c) {
      local.clear();
      where.clear();
      for (size_t k = 0; k < indices.size(); ++k) {
        if (corpus_of(indices[k]) == c) {
          local.push_back(indices[k] - s.first_index[c]);
          where.push_back(k);
        }
      }
      if (local.empty()) continue;
      s.parts[c].read_batch(local, read);
      for (size_t k = 0; k < where.size(); ++k) {
        std::swap(out[where[k]], read[k]);
        out[where[k]].index = indices[where[k]];
      }
    }
    return;
  }
  std::vector<size_t> order(indices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const IndexEntry& x = s.entries[static_cast<size_t>(indices[a])];
    const IndexEntry& y = s.entries[static_cast<size_t>(indices[b])];
    return x.shard != y.shard ? x.shard < y.shard : x.row < y.row;
  });
  out.resize(indices.size());
  auto held = h5::lock();
  for (size_t begin = 0; begin < order.size();) {
    const IndexEntry& head = s.entries[static_cast<size_t>(indices[order[begin]])];
    uint32_t last_row = head.row;
    size_t end = begin + 1;
    while (end < order.size()) {
      const IndexEntry& next = s.entries[static_cast<size_t>(indices[order[end]])];
      if (next.shard != head.shard || next.row > last_row + 1) break;
      last_row = next.row;
      ++end;
    }
    s.read_run(indices, order, begin, end, out);
    begin = end;
  }
}

}  // namespace sluice::cache
