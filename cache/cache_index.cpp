#include "cache/cache_index.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "cache/durable_file.h"
#include "cache/hdf5_handle.h"
#include "cache/shard_layout.h"
#include "cache/shard_reader.h"
#include "common/error.h"
#include "common/log.h"

namespace sluice::cache {
namespace fs = std::filesystem;

namespace {

template <class T>
void write_column(const h5::File& file, const char* name, hid_t file_type, hid_t mem_type,
                  const std::vector<T>& values, const h5::Where& where) {
  const h5::Where at = where.with(std::string("/") + name);
  h5::Dataset dataset =
      h5::create_chunked(file.id(), name, file_type, {values.size()},
                         layout::column_chunk_rows(values.size(), sizeof(T)), 0, at);
  h5::write_rows(dataset, mem_type, 0, values.size(), values.data(), at);
  dataset.close(at);
}

template <class T>
std::vector<T> read_column(const h5::File& file, const char* name, hid_t mem_type,
                           const h5::Where& where) {
  const h5::Where at = where.with(std::string("/") + name);
  h5::Dataset dataset = h5::open_dataset(file.id(), name, at);
  std::vector<hsize_t> dims = h5::extent(dataset, at);
  if (dims.size() != 1) throw CacheError(at.describe() + " is not one-dimensional");
  std::vector<T> values(dims[0]);
  h5::read_rows(dataset, mem_type, 0, dims[0], values.data(), at);
  return values;
}

// Sorted distinct values and, for each input value, its code (position in that list).
template <class Code>
std::vector<std::string> encode(const std::vector<std::string>& values, std::vector<Code>& codes,
                                const char* what) {
  std::vector<std::string> names = values;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.size() > static_cast<size_t>(std::numeric_limits<Code>::max()) + 1) {
    throw CacheError(std::string("the cache has ") + std::to_string(names.size()) + " distinct " +
                     what + "s, more than the index's code type can hold");
  }
  std::unordered_map<std::string, Code> lookup;
  for (size_t i = 0; i < names.size(); ++i) lookup.emplace(names[i], static_cast<Code>(i));
  codes.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) codes[i] = lookup.at(values[i]);
  return names;
}

}  // namespace

std::vector<fs::path> list_shard_files(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const int64_t number = parse_shard_file_name(entry.path());
    if (number >= 0 && entry.is_regular_file(error)) found.emplace_back(number, entry.path());
  }
  if (error) throw CacheError("cannot list " + dir.string() + ": " + error.message());
  std::sort(found.begin(), found.end());
  std::vector<fs::path> files;
  for (auto& item : found) files.push_back(std::move(item.second));
  return files;
}

namespace {

// What write_index gathers from the shards, one shard at a time in ascending shard order: the
// manifest's entries and totals, the index's rows, and the per-bin mel sums.
class IndexGatherer {
 public:
  explicit IndexGatherer(fs::path dir) : dir_(std::move(dir)) {}

  void add(const fs::path& file) {
    const int64_t number = check_name(file);
    ShardReader reader(file);
    check_settings(reader.info(), number, file);
    if (std::optional<MelSums> sums = reader.read_mel_sums()) {
      mel_sums_.add(*sums);
    } else {
      shards_without_sums_.push_back(file.filename().string());
    }
    ShardColumns columns = reader.read_columns();
    ManifestShard stats;
    stats.file = file.filename().string();
    stats.shard = number;
    stats.samples = reader.size();
    stats.frames = reader.mel_offsets().back();
    stats.tokens = reader.token_offsets().back();
    stats.rejects = static_cast<int64_t>(columns.rejects.size());
    for (auto& line : columns.rejects) summary_.reject_lines.push_back(std::move(line));
    for (double seconds : columns.seconds) stats.seconds += seconds;
    stats.bytes = static_cast<int64_t>(fs::file_size(file));
    add_rows(columns, stats);
    summary_.totals.samples += stats.samples;
    summary_.totals.frames += stats.frames;
    summary_.totals.tokens += stats.tokens;
    summary_.totals.rejects += stats.rejects;
    summary_.totals.seconds += stats.seconds;
    summary_.shards.push_back(stats);
  }

  // The summary, with the mel statistics (when every shard has sums) and the languages and
  // speakers encoded into `index`'s codes.
  IndexSummary finish() {
    if (summary_.shards.empty()) {
      throw CacheError("write_index: no shard files given for " + dir_.string() + "; did the prep job write any?");
    }
    if (shards_without_sums_.empty()) {
      summary_.mel_statistics = mel_sums_.statistics();
    } else {
      log::get("cache")->warn(
          "{} of {} shards ({}{}) have no /mel_sum, /mel_sum_sq (written before per-bin mel "
          "statistics): the manifest gets no mel_statistics; re-running `sluice prep` rewrites "
          "such shards",
          shards_without_sums_.size(), summary_.shards.size(), shards_without_sums_.front(),
          shards_without_sums_.size() > 1 ? ", ..." : "");
    }
    summary_.languages = encode(languages_, index_.language, "language");
    summary_.speakers = encode(speakers_, index_.speaker, "speaker");
    return std::move(summary_);
  }

  const IndexColumns& index() const { return index_; }

 private:
  // The shard number of `file`: a shard file name, in the cache directory, after the last one.
  int64_t check_name(const fs::path& file) {
    const int64_t number = parse_shard_file_name(file);
    if (number < 0) {
      throw CacheError("write_index: " + file.string() +
                       " is not a shard file name "
                       "(shard-NNNNN.h5)");
    }
    if (fs::weakly_canonical(file.parent_path()) != fs::weakly_canonical(dir_)) {
      throw CacheError("write_index: " + file.string() + " is not in the cache directory " + dir_.string());
    }
    if (number <= previous_number_) {
      throw CacheError("write_index: shard files must be given in ascending shard number; " +
                       file.filename().string() + " comes after shard " + std::to_string(previous_number_));
    }
    previous_number_ = number;
    return number;
  }

  // The shard is the one its name says, made by the same prep run as the first shard.
  void check_settings(const ShardInfo& info, int64_t number, const fs::path& file) {
    if (info.shard != number) {
      throw CacheError(file.string() + " holds shard " + std::to_string(info.shard) + " under the name of shard " +
                       std::to_string(number) + "; the file was renamed or copied: rebuild it with `sluice prep`");
    }
    if (summary_.shards.empty()) {
      summary_.fingerprint = info.fingerprint;
      summary_.n_mels = info.n_mels;
      mel_sums_ = MelSums(info.n_mels);
    } else if (info.fingerprint != summary_.fingerprint || info.n_mels != summary_.n_mels) {
      throw CacheError(file.string() + " was made with other settings (fingerprint " + info.fingerprint +
                       ", n_mels " + std::to_string(info.n_mels) + ") than " + summary_.shards.front().file +
                       " (fingerprint " + summary_.fingerprint + ", n_mels " + std::to_string(summary_.n_mels) +
                       "): the cache mixes two prep runs; delete it and run `sluice prep` again");
    }
  }

  // One index row per sample of the shard; ids must be unique across the cache.
  void add_rows(ShardColumns& columns, const ManifestShard& stats) {
    for (int64_t row = 0; row < stats.samples; ++row) {
      const size_t r = static_cast<size_t>(row);
      auto [it, inserted] = seen_ids_.emplace(columns.ids[r], std::make_pair(stats.shard, row));
      if (!inserted) {
        throw CacheError("sample id '" + columns.ids[r] + "' appears twice: " + shard_file_name(it->second.first) +
                         " row " + std::to_string(it->second.second) + " and " + stats.file + " row " +
                         std::to_string(row) +
                         "; ids must be unique: fix the corpus and rerun "
                         "`sluice prep`");
      }
      index_.ids.push_back(columns.ids[r]);
      index_.shard.push_back(static_cast<uint32_t>(stats.shard));
      index_.row.push_back(static_cast<uint32_t>(row));
      index_.n_frames.push_back(columns.n_frames[r]);
      index_.n_tokens.push_back(columns.n_tokens[r]);
      index_.seconds.push_back(static_cast<float>(columns.seconds[r]));
      languages_.push_back(std::move(columns.languages[r]));
      speakers_.push_back(std::move(columns.speakers[r]));
    }
  }

  const fs::path dir_;
  IndexSummary summary_;
  IndexColumns index_;
  std::vector<std::string> languages_, speakers_;
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> seen_ids_;  // id -> (shard, row)
  int64_t previous_number_ = -1;
  MelSums mel_sums_;
  std::vector<std::string> shards_without_sums_;
};

// Writes index.h5's columns and attributes into `file`.
void write_index_contents(const h5::File& file, const IndexColumns& index, const IndexSummary& summary,
                          const h5::Where& where) {
  {
    const h5::Where at = where.with("/id");
    h5::Datatype type = h5::utf8_string_type();
    h5::Dataset ids = h5::create_chunked(file.id(), layout::id, type.id(), {index.ids.size()},
                                         layout::column_chunk_rows(index.ids.size(), 16), 0, at);
    h5::write_string_rows(ids, 0, index.ids, at);
    ids.close(at);
  }
  write_column(file, layout::index_shard, H5T_STD_U32LE, H5T_NATIVE_UINT32, index.shard, where);
  write_column(file, layout::index_row, H5T_STD_U32LE, H5T_NATIVE_UINT32, index.row, where);
  write_column(file, layout::index_n_frames, H5T_STD_I32LE, H5T_NATIVE_INT32, index.n_frames, where);
  write_column(file, layout::index_n_tokens, H5T_STD_I32LE, H5T_NATIVE_INT32, index.n_tokens, where);
  write_column(file, layout::seconds, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, index.seconds, where);
  write_column(file, layout::language, H5T_STD_U16LE, H5T_NATIVE_UINT16, index.language, where);
  write_column(file, layout::speaker, H5T_STD_U32LE, H5T_NATIVE_UINT32, index.speaker, where);
  layout::StringsDigest digest;
  digest.begin_column(layout::id, index.ids.size());
  for (const std::string& id : index.ids) digest.add(id);
  h5::write_attribute(file.id(), layout::attr_format, std::string(layout::index_format), where);
  h5::write_attribute(file.id(), layout::attr_format_version, layout::index_format_version, where);
  h5::write_attribute(file.id(), layout::attr_fingerprint, summary.fingerprint, where);
  h5::write_attribute(file.id(), layout::attr_n_mels, summary.n_mels, where);
  h5::write_attribute(file.id(), layout::attr_strings_xxh64, digest.hex(), where);
}

}  // namespace

IndexSummary write_index(const fs::path& dir, const std::vector<fs::path>& shard_files) {
  IndexGatherer gatherer(dir);
  for (const fs::path& file : shard_files) gatherer.add(file);
  IndexSummary summary = gatherer.finish();
  const fs::path index_path = dir / summary.index_file;
  // Written under a temporary name and published whole: a reader never sees half an index.
  const fs::path temporary = durable::temporary_name(index_path);
  const h5::Where where{temporary.string(), ""};
  auto held = h5::lock();
  h5::File file;
  try {
    file = h5::create_file(temporary.string());
    write_index_contents(file, gatherer.index(), summary, where);
    file.close(where);
    durable::publish(temporary, index_path);
  } catch (...) {
    file.abandon();  // its close would fail again (the same full disk): the error is already on its way
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
  log::get("cache")->info("wrote {}: {} samples in {} shards", index_path.string(), summary.totals.samples,
                          summary.shards.size());
  return summary;
}

IndexColumns read_index(const fs::path& index_file) {
  const h5::Where where{index_file.string(), ""};
  std::error_code error;
  if (!fs::is_regular_file(index_file, error)) {
    throw CacheError("the cache index " + index_file.string() +
                     " is missing; rebuild the cache with `sluice prep` (finished shards are "
                     "kept)");
  }
  auto held = h5::lock();
  h5::File file = h5::open_file(index_file.string());
  const std::string format = h5::has_attribute(file.id(), layout::attr_format, where)
                                 ? h5::read_string_attribute(file.id(), layout::attr_format, where)
                                 : std::string();
  if (format != layout::index_format) {
    throw CacheError(index_file.string() + " is not a sluice index (format '" + format + "')");
  }
  const int64_t version = h5::read_int_attribute(file.id(), layout::attr_format_version, where);
  if (version != layout::index_format_version) {
    throw CacheError(index_file.string() + " has index format_version " + std::to_string(version) +
                     "; this sluice reads " + std::to_string(layout::index_format_version) +
                     ": rebuild the cache with `sluice prep`");
  }
  IndexColumns index;
  index.fingerprint = h5::read_string_attribute(file.id(), layout::attr_fingerprint, where);
  index.n_mels = h5::read_int_attribute(file.id(), layout::attr_n_mels, where);
  {
    const h5::Where at = where.with("/id");
    h5::Dataset ids = h5::open_dataset(file.id(), layout::id, at);
    index.ids = h5::read_string_rows(ids, 0, h5::extent(ids, at).at(0), at);
  }
  index.shard = read_column<uint32_t>(file, layout::index_shard, H5T_NATIVE_UINT32, where);
  index.row = read_column<uint32_t>(file, layout::index_row, H5T_NATIVE_UINT32, where);
  index.n_frames = read_column<int32_t>(file, layout::index_n_frames, H5T_NATIVE_INT32, where);
  index.n_tokens = read_column<int32_t>(file, layout::index_n_tokens, H5T_NATIVE_INT32, where);
  index.seconds = read_column<float>(file, layout::seconds, H5T_NATIVE_FLOAT, where);
  index.language = read_column<uint16_t>(file, layout::language, H5T_NATIVE_UINT16, where);
  index.speaker = read_column<uint32_t>(file, layout::speaker, H5T_NATIVE_UINT32, where);
  const size_t n = index.ids.size();
  if (index.shard.size() != n || index.row.size() != n || index.n_frames.size() != n ||
      index.n_tokens.size() != n || index.seconds.size() != n || index.language.size() != n ||
      index.speaker.size() != n) {
    throw CacheError(index_file.string() +
                     ": its columns differ in length; the index is "
                     "damaged: rebuild it (`sluice prep` rebuilds the index from the shards)");
  }
  return index;
}

Manifest finalize_cache(const fs::path& dir, const std::vector<fs::path>& shard_files,
                        const nlohmann::json& settings, const nlohmann::json& vocabulary) {
  // A manifest says "this cache is complete": an old one must not outlive a crash between the
  // new index and the new manifest.
  std::error_code error;
  if (fs::remove(dir / Manifest::file_name, error)) durable::fsync_path(dir, true);
  return write_manifest(dir, write_index(dir, shard_files), settings, vocabulary);
}

Manifest write_manifest(const fs::path& dir, IndexSummary summary, const nlohmann::json& settings,
                        const nlohmann::json& vocabulary) {
  Manifest manifest;
  manifest.fingerprint = summary.fingerprint;
  manifest.created = iso8601_now();
  manifest.settings = settings;
  // The prep job's cache.mel_dtype (absent when float32, runtime/settings.cpp output_settings).
  if (settings.is_object() && settings.contains("cache") && settings["cache"].contains("mel_dtype")) {
    manifest.mel_dtype = settings["cache"]["mel_dtype"].get<std::string>();
  }
  manifest.format_version = manifest.mel_dtype == "float16" ? 2 : 1;
  manifest.vocabulary = vocabulary;
  manifest.languages = std::move(summary.languages);
  manifest.speakers = std::move(summary.speakers);
  manifest.shards = std::move(summary.shards);
  manifest.totals = summary.totals;
  manifest.index = summary.index_file;
  manifest.mel_statistics = std::move(summary.mel_statistics);
  manifest.write(dir);
  return manifest;
}

}  // namespace sluice::cache
