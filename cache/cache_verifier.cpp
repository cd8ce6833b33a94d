#include "cache/cache_verifier.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "cache/cache_index.h"
#include "cache/durable_file.h"
#include "cache/hdf5_handle.h"
#include "cache/manifest.h"
#include "cache/mel_statistics.h"
#include "cache/shard_layout.h"
#include "cache/shard_reader.h"
#include "common/error.h"

namespace sluice::cache {
namespace fs = std::filesystem;

namespace {

// Datasets are read in blocks of whole chunks of about this many bytes; a block that fails is
// re-read chunk by chunk to name each damaged chunk.
constexpr hsize_t block_bytes = 4 << 20;

// Where a failed element range of a dataset lies, in samples.
struct Location {
  int64_t row = -1;
  std::string sample_id;
  std::string text;  // "rows 3..4 ('a' .. 'b')"
};
using Locator = std::function<Location(int64_t first, int64_t count)>;

struct DatasetRead {
  bool ok = false;
  std::vector<hsize_t> dims;
};

std::string quoted_ids(const std::vector<std::string>& ids, int64_t first, int64_t last) {
  auto id = [&](int64_t row) {
    return row >= 0 && row < static_cast<int64_t>(ids.size()) && !ids[row].empty()
               ? "'" + ids[row] + "'"
               : std::string("?");
  };
  return first == last ? id(first) : id(first) + " .. " + id(last);
}

bool nearly_equal(double a, double b) {
  return std::fabs(a - b) <= 1e-6 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

class Verifier {
 public:
  explicit Verifier(fs::path dir) { result_.dir = std::move(dir); }

  VerifyResult run() {
    std::error_code error;
    if (!fs::is_directory(result_.dir, error)) {
      fault(".", -1, "", "the cache directory does not exist");
      return std::move(result_);
    }
    Manifest manifest;
    try {
      manifest = Manifest::read(result_.dir);
    } catch (const std::exception& failure) {
      fault(Manifest::file_name, -1, "", failure.what());
      return std::move(result_);
    }
    check_manifest(manifest);
    check_index(manifest);
    for (const ManifestShard& shard : manifest.shards) check_shard(manifest, shard);
    check_mel_statistics(manifest);
    scan_directory(manifest);
    return std::move(result_);
  }

  // One shard on its own, before a manifest exists (prep deciding whether to keep it): every
  // check of check_shard but those against the manifest's entry and the index.
  VerifyResult run_shard(const fs::path& path, const std::string& fingerprint) {
    Manifest manifest;
    manifest.fingerprint = fingerprint;
    ManifestShard entry;
    entry.file = path.filename().string();
    entry.shard = parse_shard_file_name(path);
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      fault(entry.file, -1, "", "missing");
      return std::move(result_);
    }
    auto held = h5::lock();
    ShardRead shard;
    if (open_shard(manifest, entry, path, shard)) {
      ++result_.shards_checked;
      check_shard_contents(entry.file, shard);
      result_.samples_checked += shard.rows;
    }
    return std::move(result_);
  }

 private:
  // index.h5's columns as check_index read them, and its rows of each shard in index order.
  struct IndexView : IndexColumns {
    bool ok = false;  // read whole and consistent: the shards are checked against it
    std::map<uint32_t, std::vector<size_t>> rows_of_shard;
  };

  void fault(const std::string& file, int64_t row, const std::string& id, const std::string& what) {
    result_.faults.push_back({file, row, id, what});
  }

  // Reads all of dataset `name`, chunk block by chunk block; calls keep(first, count, data) with
  // each block's rows (data is dims[1..]-wide rows of T). Faults name each unreadable chunk.
  template <class T>
  DatasetRead read_numeric(hid_t file, const std::string& label, const char* name, hid_t mem_type,
                           H5T_class_t expected_class, const Locator& locate,
                           const std::function<void(hsize_t, hsize_t, const T*)>& keep) {
    DatasetRead read;
    const h5::Where at{(result_.dir / label).string(), std::string("/") + name};
    h5::Dataset dataset;
    hsize_t chunk_rows = 0;
    if (!open_checked(file, label, name, expected_class, at, dataset, read.dims, chunk_rows)) {
      return read;
    }
    hsize_t row_elements = 1;
    for (size_t d = 1; d < read.dims.size(); ++d) row_elements *= read.dims[d];
    std::vector<T> block;
    read.ok = read_in_chunks(label, name, read.dims[0], chunk_rows, row_elements * sizeof(T),
                             locate, [&](hsize_t first, hsize_t count) {
                               block.resize(count * row_elements);
                               h5::read_rows(dataset, mem_type, first, count, block.data(), at);
                               if (keep) keep(first, count, block.data());
                             });
    return read;
  }

  DatasetRead read_strings(hid_t file, const std::string& label, const char* name,
                           const Locator& locate, std::vector<std::string>& out) {
    DatasetRead read;
    const h5::Where at{(result_.dir / label).string(), std::string("/") + name};
    h5::Dataset dataset;
    hsize_t chunk_rows = 0;
    if (!open_checked(file, label, name, H5T_STRING, at, dataset, read.dims, chunk_rows)) {
      return read;
    }
    out.assign(read.dims[0], std::string());
    read.ok = read_in_chunks(
        label, name, read.dims[0], chunk_rows, 16, locate, [&](hsize_t first, hsize_t count) {
          std::vector<std::string> rows = h5::read_string_rows(dataset, first, count, at);
          std::move(rows.begin(), rows.end(), out.begin() + first);
        });
    return read;
  }

  bool open_checked(hid_t file, const std::string& label, const char* name,
                    H5T_class_t expected_class, const h5::Where& at, h5::Dataset& dataset,
                    std::vector<hsize_t>& dims, hsize_t& chunk_rows) {
    const std::string object = std::string("/") + name;
    try {
      dataset = h5::open_dataset(file, name, at);
      dims = h5::extent(dataset, at);
      std::vector<hsize_t> chunk = h5::chunk_shape(dataset, at);
      if (dims.empty()) {
        fault(label, -1, "", object + " is a scalar; expected an array");
        return false;
      }
      if (h5::type_class(dataset, at) != expected_class) {
        fault(label, -1, "", object + " has the wrong element type");
        return false;
      }
      if (chunk.empty()) {
        fault(label, -1, "", object + " is not chunked, so it carries no checksums");
        chunk_rows = std::max<hsize_t>(dims[0], 1);
      } else {
        chunk_rows = std::max<hsize_t>(chunk[0], 1);
        // Variable-length strings cannot carry filters; strings_xxh64 covers them instead.
        if (expected_class != H5T_STRING && !h5::has_fletcher32(dataset, at)) {
          fault(label, -1, "", object + " has no fletcher32 filter: its chunks carry no checksums");
        }
      }
      return true;
    } catch (const CacheError& error) {
      fault(label, -1, "", "cannot open " + object + ": " + error.what());
      return false;
    }
  }

  bool read_in_chunks(const std::string& label, const char* name, hsize_t rows, hsize_t chunk_rows,
                      hsize_t row_bytes, const Locator& locate,
                      const std::function<void(hsize_t, hsize_t)>& read_block) {
    const hsize_t chunks_per_block =
        std::max<hsize_t>(1, block_bytes / std::max<hsize_t>(1, chunk_rows * row_bytes));
    const hsize_t block_rows = chunk_rows * chunks_per_block;
    bool ok = true;
    for (hsize_t first = 0; first < rows; first += block_rows) {
      const hsize_t count = std::min(block_rows, rows - first);
      try {
        read_block(first, count);
        result_.chunks_checked += static_cast<int64_t>((count + chunk_rows - 1) / chunk_rows);
        result_.bytes_checked += static_cast<int64_t>(count * row_bytes);
        continue;
      } catch (const CacheError&) {
        // Fall through: find the damaged chunk(s) of this block.
      }
      for (hsize_t chunk_first = first; chunk_first < first + count; chunk_first += chunk_rows) {
        const hsize_t n = std::min(chunk_rows, first + count - chunk_first);
        ++result_.chunks_checked;
        try {
          read_block(chunk_first, n);
          result_.bytes_checked += static_cast<int64_t>(n * row_bytes);
        } catch (const CacheError& error) {
          ok = false;
          Location where = locate(static_cast<int64_t>(chunk_first), static_cast<int64_t>(n));
          fault(label, where.row, where.sample_id,
                "/" + std::string(name) + " elements " + std::to_string(chunk_first) + ".." +
                    std::to_string(chunk_first + n - 1) +
                    (where.text.empty() ? std::string() : " (" + where.text + ")") +
                    " unreadable: " + error.what());
        }
      }
    }
    return ok;
  }

  // Rows of a per-sample column map one to one to samples.
  static Locator row_locator(const std::vector<std::string>& ids) {
    return [&ids](int64_t first, int64_t count) {
      Location where;
      where.row = first;
      if (first < static_cast<int64_t>(ids.size())) where.sample_id = ids[first];
      where.text = "rows " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
                   ": " + quoted_ids(ids, first, first + count - 1);
      return where;
    };
  }

  // Elements of /mel or /tokens map to samples through an offsets column (when it was readable).
  static Locator offset_locator(const std::vector<int64_t>& offsets, const bool& offsets_ok,
                                const std::vector<std::string>& ids) {
    return [&offsets, &offsets_ok, &ids](int64_t first, int64_t count) {
      Location where;
      if (!offsets_ok || offsets.size() < 2) return where;
      auto row_of = [&](int64_t element) {
        auto it = std::upper_bound(offsets.begin(), offsets.end(), element);
        int64_t row = static_cast<int64_t>(it - offsets.begin()) - 1;
        return std::clamp<int64_t>(row, 0, static_cast<int64_t>(offsets.size()) - 2);
      };
      const int64_t first_row = row_of(first);
      const int64_t last_row = row_of(first + count - 1);
      where.row = first_row;
      if (first_row < static_cast<int64_t>(ids.size())) where.sample_id = ids[first_row];
      where.text = "rows " + std::to_string(first_row) + ".." + std::to_string(last_row) + ": " +
                   quoted_ids(ids, first_row, last_row);
      return where;
    };
  }

  void check_offsets(const std::string& label, const char* name,
                     const std::vector<int64_t>& offsets, int64_t rows, int64_t data_rows,
                     const std::vector<std::string>& ids) {
    const std::string object = std::string("/") + name;
    if (static_cast<int64_t>(offsets.size()) != rows + 1) {
      fault(label, -1, "",
            object + " has " + std::to_string(offsets.size()) +
                " entries; expected rows + 1 = " + std::to_string(rows + 1));
      return;
    }
    if (offsets.front() != 0) fault(label, 0, ids.empty() ? "" : ids[0], object + "[0] is not 0");
    for (size_t i = 1; i < offsets.size(); ++i) {
      if (offsets[i] < offsets[i - 1]) {
        const int64_t row = static_cast<int64_t>(i) - 1;
        fault(label, row, row < static_cast<int64_t>(ids.size()) ? ids[row] : "",
              object + " decreases at entry " + std::to_string(i) + " (" +
                  std::to_string(offsets[i - 1]) + " -> " + std::to_string(offsets[i]) + ")");
        return;
      }
    }
    if (offsets.back() != data_rows) {
      fault(label, -1, "",
            object + " ends at " + std::to_string(offsets.back()) + " but the data has " +
                std::to_string(data_rows) + " rows");
    }
  }

  // /mel_chunk_addresses (optional) must match HDF5's chunk index entry by entry: readers take
  // /mel chunks at these addresses.
  void check_chunk_addresses(hid_t file, const std::string& label,
                             const std::vector<int64_t>& mel_offsets, bool mel_offsets_ok,
                             const std::vector<std::string>& ids) {
    const h5::Where where{(result_.dir / label).string(), ""};
    try {
      if (!h5::has_link(file, layout::mel_chunk_addresses, where)) return;
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
      return;
    }
    std::vector<uint64_t> table;
    const DatasetRead read = read_numeric<uint64_t>(
        file, label, layout::mel_chunk_addresses, H5T_NATIVE_UINT64, H5T_INTEGER,
        [](int64_t first, int64_t) {
          return Location{-1, "", "chunk " + std::to_string(first)};
        },
        [&table](hsize_t, hsize_t count, const uint64_t* data) {
          table.insert(table.end(), data, data + count);
        });
    if (!read.ok) return;
    try {
      const h5::Where at = where.with("/mel");
      h5::Dataset mel = h5::open_dataset(file, layout::mel, at);
      const std::vector<hsize_t> dims = h5::extent(mel, at);
      const std::vector<hsize_t> chunk = h5::chunk_shape(mel, at);
      if (dims.size() != 2 || chunk.size() != 2) return;  // reported by the /mel checks
      const hsize_t chunks = (dims[0] + chunk[0] - 1) / chunk[0];
      if (table.size() != chunks) {
        fault(label, -1, "",
              "/mel_chunk_addresses has " + std::to_string(table.size()) + " entries for /mel's " +
                  std::to_string(chunks) + " chunks");
        return;
      }
      const Locator locate = offset_locator(mel_offsets, mel_offsets_ok, ids);
      for (hsize_t c = 0; c < chunks; ++c) {
        const hsize_t offset[2] = {c * chunk[0], 0};
        const h5::ChunkPlace place = h5::chunk_place(mel, offset, at);
        if (place.address != table[c]) {
          const Location where_rows =
              locate(static_cast<int64_t>(c * chunk[0]), static_cast<int64_t>(chunk[0]));
          fault(label, where_rows.row, where_rows.sample_id,
                "/mel_chunk_addresses[" + std::to_string(c) + "] is " + std::to_string(table[c]) +
                    " but HDF5 stores that chunk at " + std::to_string(place.address) +
                    " (was the file rewritten?); readers would take the wrong bytes: rebuild "
                    "the shard");
          return;
        }
      }
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
    }
  }

  void check_manifest(const Manifest& m) {
    ManifestTotals sum;
    int64_t previous = -1;
    for (const ManifestShard& shard : m.shards) {
      sum.samples += shard.samples;
      sum.frames += shard.frames;
      sum.tokens += shard.tokens;
      sum.rejects += shard.rejects;
      sum.seconds += shard.seconds;
      if (shard.shard <= previous) {
        fault(Manifest::file_name, -1, "",
              "shards are not in ascending shard order at " + shard.file);
      }
      previous = shard.shard;
      if (shard.file != shard_file_name(shard.shard)) {
        fault(Manifest::file_name, -1, "",
              "shard " + std::to_string(shard.shard) + " is listed under the file name " +
                  shard.file);
      }
    }
    if (sum.samples != m.totals.samples || sum.frames != m.totals.frames ||
        sum.tokens != m.totals.tokens || sum.rejects != m.totals.rejects ||
        !nearly_equal(sum.seconds, m.totals.seconds)) {
      fault(Manifest::file_name, -1, "",
            "totals differ from the sum over its shards (samples " +
                std::to_string(m.totals.samples) + " vs " + std::to_string(sum.samples) + ")");
    }
  }

  void check_index(const Manifest& m) {
    const std::string label = m.index;
    const fs::path path = result_.dir / label;
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      fault(label, -1, "", "missing: rebuild the cache with `sluice prep`");
      return;
    }
    auto held = h5::lock();
    h5::File file;
    if (!open_index(m, path, file)) return;
    if (!read_index_columns(file.id(), label)) return;
    const IndexView& x = index_;
    const size_t n = x.ids.size();
    if (x.shard.size() != n || x.row.size() != n || x.n_frames.size() != n ||
        x.n_tokens.size() != n || x.seconds.size() != n || x.language.size() != n ||
        x.speaker.size() != n) {
      fault(label, -1, "", "its columns differ in length");
      return;
    }
    if (static_cast<int64_t>(n) != m.totals.samples) {
      fault(label, -1, "",
            "holds " + std::to_string(n) + " samples; the manifest says " +
                std::to_string(m.totals.samples));
    }
    check_index_digest(file, path, label);
    if (!group_index_rows(m, label)) return;
    index_.ok = true;
  }

  // Opens index.h5 and checks its format and fingerprint; reads n_mels. False when it cannot be
  // read.
  bool open_index(const Manifest& m, const fs::path& path, h5::File& file) {
    const std::string label = m.index;
    const h5::Where where{path.string(), ""};
    try {
      file = h5::open_file(path.string());
      const std::string format = h5::read_string_attribute(file.id(), layout::attr_format, where);
      const int64_t version = h5::read_int_attribute(file.id(), layout::attr_format_version, where);
      if (format != layout::index_format || version != layout::index_format_version) {
        fault(label, -1, "",
              "format is '" + format + "' version " + std::to_string(version) + "; expected '" +
                  layout::index_format + "' version " +
                  std::to_string(layout::index_format_version));
      }
      const std::string fingerprint =
          h5::read_string_attribute(file.id(), layout::attr_fingerprint, where);
      if (fingerprint != m.fingerprint) {
        fault(label, -1, "",
              "fingerprint " + fingerprint + " differs from the manifest's " + m.fingerprint);
      }
      index_.n_mels = h5::read_int_attribute(file.id(), layout::attr_n_mels, where);
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
      return false;
    }
    return true;
  }

  // Every column of index.h5 into index_ (each chunk's checksum verified). False when one could
  // not be read whole.
  bool read_index_columns(hid_t f, const std::string& label) {
    IndexView& x = index_;
    const Locator locate = row_locator(x.ids);
    bool ok = read_strings(f, label, layout::id, locate, x.ids).ok;
    auto keeper = [](auto& column) {
      using T = typename std::decay_t<decltype(column)>::value_type;
      return std::function<void(hsize_t, hsize_t, const T*)>(
          [&column](hsize_t first, hsize_t count, const T* data) {
            if (column.size() < first + count) column.resize(first + count);
            std::copy(data, data + count, column.begin() + first);
          });
    };
    ok &= read_numeric<uint32_t>(f, label, layout::index_shard, H5T_NATIVE_UINT32, H5T_INTEGER,
                                 locate, keeper(x.shard))
              .ok;
    ok &= read_numeric<uint32_t>(f, label, layout::index_row, H5T_NATIVE_UINT32, H5T_INTEGER,
                                 locate, keeper(x.row))
              .ok;
    ok &= read_numeric<int32_t>(f, label, layout::index_n_frames, H5T_NATIVE_INT32, H5T_INTEGER,
                                locate, keeper(x.n_frames))
              .ok;
    ok &= read_numeric<int32_t>(f, label, layout::index_n_tokens, H5T_NATIVE_INT32, H5T_INTEGER,
                                locate, keeper(x.n_tokens))
              .ok;
    ok &= read_numeric<float>(f, label, layout::seconds, H5T_NATIVE_FLOAT, H5T_FLOAT, locate,
                              keeper(x.seconds))
              .ok;
    ok &= read_numeric<uint16_t>(f, label, layout::language, H5T_NATIVE_UINT16, H5T_INTEGER, locate,
                                 keeper(x.language))
              .ok;
    ok &= read_numeric<uint32_t>(f, label, layout::speaker, H5T_NATIVE_UINT32, H5T_INTEGER, locate,
                                 keeper(x.speaker))
              .ok;
    return ok;
  }

  // The ids' strings carry no HDF5 checksum; strings_xxh64 covers them.
  void check_index_digest(const h5::File& file, const fs::path& path, const std::string& label) {
    const h5::Where where{path.string(), ""};
    try {
      layout::StringsDigest digest;
      digest.begin_column(layout::id, index_.ids.size());
      for (const std::string& id : index_.ids) digest.add(id);
      const std::string stored =
          h5::read_string_attribute(file.id(), layout::attr_strings_xxh64, where);
      if (digest.hex() != stored) {
        fault(label, -1, "",
              "the ids' strings_xxh64 is " + digest.hex() + ", the file says " + stored +
                  ": the string heap is damaged");
      }
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
    }
  }

  // Rows in cache order with codes inside the manifest's lists, grouped by shard into
  // rows_of_shard; every shard they point at is listed. False at the first row out of order or
  // out of range.
  bool group_index_rows(const Manifest& m, const std::string& label) {
    IndexView& x = index_;
    for (size_t i = 0; i < x.ids.size(); ++i) {
      if (i > 0 && (x.shard[i] < x.shard[i - 1] ||
                    (x.shard[i] == x.shard[i - 1] && x.row[i] <= x.row[i - 1]))) {
        fault(label, static_cast<int64_t>(i), x.ids[i], "not in cache order (shard, row)");
        return false;
      }
      if (x.language[i] >= m.languages.size() || x.speaker[i] >= m.speakers.size()) {
        fault(label, static_cast<int64_t>(i), x.ids[i],
              "language or speaker code outside the manifest's lists");
        return false;
      }
      x.rows_of_shard[x.shard[i]].push_back(i);
    }
    for (const auto& [shard, rows] : x.rows_of_shard) {
      bool listed =
          std::any_of(m.shards.begin(), m.shards.end(),
                      [shard = shard](const ManifestShard& s) { return s.shard == shard; });
      if (!listed) {
        fault(label, static_cast<int64_t>(rows.front()), x.ids[rows.front()],
              "points at shard " + std::to_string(shard) + ", which the manifest does not list");
      }
    }
    return true;
  }

  // One shard's attributes and columns as check_shard read them. Locators made while reading
  // refer to the members, so a ShardRead stays where it was made.
  struct ShardRead {
    h5::File file;
    int64_t n_mels = 0;
    std::string stored_digest;
    std::vector<std::string> ids, texts, languages, speakers, rejects;
    std::vector<double> seconds;
    std::vector<int64_t> mel_offsets, token_offsets;
    DatasetRead id_read, seconds_read, mel_read, tokens_read;
    bool mel_offsets_ok = false, token_offsets_ok = false, strings_ok = false;
    int64_t rows = 0;
    // While /mel is read for its checksums anyway, its frames are summed per bin in the
    // writer's order, so the shard's stored /mel_sum and /mel_sum_sq can be checked exactly.
    MelSums from_mel;
    bool sum_mel = false;
  };

  void check_shard(const Manifest& m, const ManifestShard& entry) {
    const std::string label = entry.file;
    const fs::path path = result_.dir / label;
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      fault(label, -1, "", "missing: listed in manifest.json but not on disk");
      mel_sums_usable_ = false;  // the total over the shards is unknown
      return;
    }
    auto held = h5::lock();
    ShardRead shard;
    if (!open_shard(m, entry, path, shard)) {
      mel_sums_usable_ = false;  // the total over the shards is unknown
      return;
    }
    ++result_.shards_checked;
    check_shard_contents(label, shard);
    check_against_manifest(label, path, entry, shard);
    check_against_index(label, m, entry, shard);
    result_.samples_checked += shard.rows;
  }

  // Every chunk's checksum, the offsets, the chunk address table, the per-bin sums, the strings'
  // digest and the shapes: what a shard says about itself.
  void check_shard_contents(const std::string& label, ShardRead& shard) {
    read_shard_columns(label, shard);
    check_chunk_addresses(shard.file.id(), label, shard.mel_offsets, shard.mel_offsets_ok, shard.ids);
    const int64_t mel_rows = shard.mel_read.dims.empty() ? -1 : static_cast<int64_t>(shard.mel_read.dims[0]);
    check_mel_sums(shard.file.id(), label, shard.n_mels, mel_rows,
                   shard.sum_mel && shard.mel_read.ok ? &shard.from_mel : nullptr);
    check_strings_digest(label, shard);
    check_shapes(label, shard);
  }

  // Opens the shard and checks its attributes against the manifest and the index. False when the
  // file cannot be opened at all (then nothing else can be checked).
  bool open_shard(const Manifest& m, const ManifestShard& entry, const fs::path& path, ShardRead& shard) {
    const std::string label = entry.file;
    const h5::Where where{path.string(), ""};
    try {
      shard.file = h5::open_file(path.string());
      const hid_t root = shard.file.id();
      const std::string format = h5::read_string_attribute(root, layout::attr_format, where);
      const int64_t version = h5::read_int_attribute(root, layout::attr_format_version, where);
      const bool float16 = m.mel_dtype == "float16";
      const int64_t expected = float16 ? layout::shard_format_version_float16 : layout::shard_format_version;
      if (format != layout::shard_format || version != expected) {
        fault(label, -1, "",
              "format is '" + format + "' version " + std::to_string(version) + "; expected '" +
                  layout::shard_format + "' version " + std::to_string(expected) + " (manifest.json's mel_dtype " +
                  m.mel_dtype + ")");
      }
      if (h5::has_link(root, layout::mel, where)) {
        const h5::Where at = where.with("/mel");
        const h5::Dataset mel = h5::open_dataset(root, layout::mel, at);
        if (!h5::stored_type_is(mel, float16 ? h5::ieee_f16le() : H5T_IEEE_F32LE, at)) {
          fault(label, -1, "",
                std::string("/mel is not stored as ") + (float16 ? "IEEE float16" : "IEEE float32 little-endian") +
                    ", as manifest.json's mel_dtype " + m.mel_dtype + " says");
        }
      }
      const std::string fingerprint =
          h5::read_string_attribute(root, layout::attr_fingerprint, where);
      if (fingerprint != m.fingerprint) {
        fault(label, -1, "",
              "fingerprint " + fingerprint + " differs from the manifest's " + m.fingerprint +
                  ": this shard comes from another prep run");
      }
      const int64_t number = h5::read_int_attribute(root, layout::attr_shard, where);
      if (number != entry.shard) {
        fault(label, -1, "",
              "holds shard " + std::to_string(number) + ", but its name says " +
                  std::to_string(entry.shard));
      }
      shard.n_mels = h5::read_int_attribute(root, layout::attr_n_mels, where);
      if (index_.ok && shard.n_mels != index_.n_mels) {
        fault(label, -1, "",
              "n_mels " + std::to_string(shard.n_mels) + " differs from the index's " +
                  std::to_string(index_.n_mels));
      }
      shard.stored_digest = h5::read_string_attribute(root, layout::attr_strings_xxh64, where);
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
      return shard.file.valid();
    }
    return true;
  }

  // Reads every column (each chunk's checksum is verified on the way), summing /mel per bin when
  // its width is n_mels.
  void read_shard_columns(const std::string& label, ShardRead& shard) {
    const hid_t f = shard.file.id();
    const Locator by_row = row_locator(shard.ids);
    shard.id_read = read_strings(f, label, layout::id, by_row, shard.ids);
    shard.seconds_read = read_numeric<double>(f, label, layout::seconds, H5T_NATIVE_DOUBLE, H5T_FLOAT, by_row,
                                              collect<double>(shard.seconds));
    shard.mel_offsets_ok = read_numeric<int64_t>(f, label, layout::mel_offsets, H5T_NATIVE_INT64, H5T_INTEGER,
                                                 by_row, collect<int64_t>(shard.mel_offsets))
                               .ok;
    shard.token_offsets_ok = read_numeric<int64_t>(f, label, layout::token_offsets, H5T_NATIVE_INT64, H5T_INTEGER,
                                                   by_row, collect<int64_t>(shard.token_offsets))
                                 .ok;
    shard.rows = shard.seconds_read.ok
                     ? static_cast<int64_t>(shard.seconds.size())
                     : static_cast<int64_t>(shard.id_read.dims.empty() ? 0 : shard.id_read.dims[0]);
    shard.from_mel = MelSums(shard.n_mels > 0 ? shard.n_mels : 0);
    shard.sum_mel = shard.n_mels > 0 && mel_width(f, label) == shard.n_mels;
    MelSums& from_mel = shard.from_mel;
    shard.mel_read = read_numeric<float>(
        f, label, layout::mel, H5T_NATIVE_FLOAT, H5T_FLOAT,
        offset_locator(shard.mel_offsets, shard.mel_offsets_ok, shard.ids),
        shard.sum_mel ? std::function<void(hsize_t, hsize_t, const float*)>(
                            [&from_mel](hsize_t, hsize_t count, const float* data) {
                              from_mel.add_frames(data, static_cast<int64_t>(count));
                            })
                      : nullptr);
    shard.tokens_read = read_numeric<int32_t>(f, label, layout::tokens, H5T_NATIVE_INT32, H5T_INTEGER,
                                              offset_locator(shard.token_offsets, shard.token_offsets_ok, shard.ids),
                                              nullptr);
    const Locator by_reject = [](int64_t first, int64_t) {
      return Location{-1, "", "reject line " + std::to_string(first)};
    };
    const bool texts_ok = read_strings(f, label, layout::text, by_row, shard.texts).ok;
    const bool languages_ok = read_strings(f, label, layout::language, by_row, shard.languages).ok;
    const bool speakers_ok = read_strings(f, label, layout::speaker, by_row, shard.speakers).ok;
    const bool rejects_ok = read_strings(f, label, layout::rejects, by_reject, shard.rejects).ok;
    shard.strings_ok = shard.id_read.ok && texts_ok && languages_ok && speakers_ok && rejects_ok;
  }

  // Appends each block's values to `out` (a column read whole).
  template <class T>
  static std::function<void(hsize_t, hsize_t, const T*)> collect(std::vector<T>& out) {
    return [&out](hsize_t, hsize_t count, const T* data) { out.insert(out.end(), data, data + count); };
  }

  // Strings carry no HDF5 checksum (HDF5 allows no filter on variable-length data); the digest
  // covers their bytes.
  void check_strings_digest(const std::string& label, const ShardRead& shard) {
    if (!shard.strings_ok || shard.stored_digest.empty()) return;
    layout::StringsDigest digest;
    const std::vector<std::string>* columns[] = {&shard.ids, &shard.texts, &shard.languages, &shard.speakers,
                                                 &shard.rejects};
    for (size_t c = 0; c < layout::shard_string_columns.size(); ++c) {
      digest.begin_column(layout::shard_string_columns[c], columns[c]->size());
      for (const std::string& value : *columns[c]) digest.add(value);
    }
    if (digest.hex() != shard.stored_digest) {
      fault(label, -1, "",
            "strings_xxh64 of /id, /text, /language, /speaker, /rejects is " + digest.hex() +
                ", the file says " + shard.stored_digest + ": a string was changed on disk");
    }
  }

  // Shapes and offsets: every per-sample column has the same rows, offsets cover the data.
  void check_shapes(const std::string& label, const ShardRead& shard) {
    const int64_t rows = shard.rows;
    if (shard.mel_read.dims.size() == 2 && static_cast<int64_t>(shard.mel_read.dims[1]) != shard.n_mels) {
      fault(label, -1, "",
            "/mel has " + std::to_string(shard.mel_read.dims[1]) + " columns; attribute n_mels says " +
                std::to_string(shard.n_mels));
    }
    if (shard.id_read.ok && static_cast<int64_t>(shard.id_read.dims[0]) != rows) {
      fault(label, -1, "",
            "/id has " + std::to_string(shard.id_read.dims[0]) + " rows; /seconds has " +
                std::to_string(rows));
    }
    if (shard.strings_ok) {
      for (auto [column, values] :
           {std::pair<const char*, const std::vector<std::string>*>{layout::text, &shard.texts},
            {layout::language, &shard.languages},
            {layout::speaker, &shard.speakers}}) {
        if (static_cast<int64_t>(values->size()) != rows) {
          fault(label, -1, "",
                std::string("/") + column + " has " + std::to_string(values->size()) +
                    " rows; /seconds has " + std::to_string(rows));
        }
      }
    }
    if (shard.mel_offsets_ok && !shard.mel_read.dims.empty()) {
      check_offsets(label, layout::mel_offsets, shard.mel_offsets, rows,
                    static_cast<int64_t>(shard.mel_read.dims[0]), shard.ids);
    }
    if (shard.token_offsets_ok && !shard.tokens_read.dims.empty()) {
      check_offsets(label, layout::token_offsets, shard.token_offsets, rows,
                    static_cast<int64_t>(shard.tokens_read.dims[0]), shard.ids);
    }
  }

  // The shard's counts, seconds and size must be its manifest entry's.
  void check_against_manifest(const std::string& label, const fs::path& path, const ManifestShard& entry,
                              const ShardRead& shard) {
    const int64_t rows = shard.rows;
    const int64_t frames = shard.mel_read.dims.empty() ? -1 : static_cast<int64_t>(shard.mel_read.dims[0]);
    const int64_t tokens = shard.tokens_read.dims.empty() ? -1 : static_cast<int64_t>(shard.tokens_read.dims[0]);
    double seconds_sum = 0;
    for (double s : shard.seconds) seconds_sum += s;
    std::error_code error;
    const int64_t bytes = static_cast<int64_t>(fs::file_size(path, error));
    std::ostringstream mismatch;
    if (rows != entry.samples) mismatch << " samples " << rows << " vs " << entry.samples << ";";
    if (frames != entry.frames) mismatch << " frames " << frames << " vs " << entry.frames << ";";
    if (tokens != entry.tokens) mismatch << " tokens " << tokens << " vs " << entry.tokens << ";";
    if (shard.strings_ok && static_cast<int64_t>(shard.rejects.size()) != entry.rejects) {
      mismatch << " rejects " << shard.rejects.size() << " vs " << entry.rejects << ";";
    }
    if (shard.seconds_read.ok && !nearly_equal(seconds_sum, entry.seconds)) {
      mismatch << " seconds " << seconds_sum << " vs " << entry.seconds << ";";
    }
    if (bytes != entry.bytes) mismatch << " bytes " << bytes << " vs " << entry.bytes << ";";
    if (!mismatch.str().empty()) {
      fault(label, -1, "",
            "differs from its manifest entry (shard vs manifest):" + mismatch.str() +
                " the file was replaced or changed after the cache was built");
    }
  }

  // Against the index, row by row (when everything it compares was read).
  void check_against_index(const std::string& label, const Manifest& m, const ManifestShard& entry,
                           const ShardRead& shard) {
    const int64_t rows = shard.rows;
    if (!(index_.ok && shard.id_read.ok && shard.seconds_read.ok && shard.mel_offsets_ok && shard.token_offsets_ok &&
          shard.strings_ok && static_cast<int64_t>(shard.mel_offsets.size()) == rows + 1 &&
          static_cast<int64_t>(shard.token_offsets.size()) == rows + 1)) {
      return;
    }
    auto it = index_.rows_of_shard.find(static_cast<uint32_t>(entry.shard));
    const std::vector<size_t> none;
    const std::vector<size_t>& index_rows = it == index_.rows_of_shard.end() ? none : it->second;
    if (static_cast<int64_t>(index_rows.size()) != rows) {
      fault(label, -1, "",
            "index.h5 lists " + std::to_string(index_rows.size()) +
                " rows of this shard; it has " + std::to_string(rows));
    }
    for (size_t k = 0; k < index_rows.size() && static_cast<int64_t>(k) < rows; ++k) {
      const size_t i = index_rows[k];
      const std::string problem = index_row_problem(m, shard, i, k);
      if (!problem.empty()) {
        fault(label, static_cast<int64_t>(k), shard.ids[k],
              "index.h5 row " + std::to_string(i) + " disagrees on " + problem);
      }
    }
  }

  // What index.h5 row `i` gets wrong about the shard's row `k`, or empty.
  std::string index_row_problem(const Manifest& m, const ShardRead& shard, size_t i, size_t k) const {
    if (index_.row[i] != k) return "row number";
    if (index_.ids[i] != shard.ids[k]) return "id ('" + index_.ids[i] + "')";
    if (index_.n_frames[i] != shard.mel_offsets[k + 1] - shard.mel_offsets[k]) return "n_frames";
    if (index_.n_tokens[i] != shard.token_offsets[k + 1] - shard.token_offsets[k]) return "n_tokens";
    if (index_.seconds[i] != static_cast<float>(shard.seconds[k])) return "seconds";
    if (m.languages[index_.language[i]] != shard.languages[k]) return "language";
    if (m.speakers[index_.speaker[i]] != shard.speakers[k]) return "speaker";
    return "";
  }

  void scan_directory(const Manifest& m) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(result_.dir, error)) {
      const std::string name = entry.path().filename().string();
      if (durable::is_temporary_name(name)) {
        result_.notes.push_back(name +
                                " is a temporary left by an interrupted writer; it is not "
                                "part of the cache and can be deleted");
        continue;
      }
      const int64_t number = parse_shard_file_name(entry.path());
      if (number >= 0 && std::none_of(m.shards.begin(), m.shards.end(),
                                      [&](const ManifestShard& s) { return s.shard == number; })) {
        result_.notes.push_back(name + " is not listed in manifest.json (ignored by readers)");
      }
    }
  }

  // Width of /mel, or -1 when it cannot be read (the /mel checks report why).
  int64_t mel_width(hid_t file, const std::string& label) const {
    const h5::Where at{(result_.dir / label).string(), "/mel"};
    try {
      h5::Dataset mel = h5::open_dataset(file, layout::mel, at);
      const std::vector<hsize_t> dims = h5::extent(mel, at);
      return dims.size() == 2 ? static_cast<int64_t>(dims[1]) : -1;
    } catch (const CacheError&) {
      return -1;
    }
  }

  // A shard's /mel_sum and /mel_sum_sq (optional: shards written before per-bin statistics have
  // neither) must be n_mels long and equal the sums of its /mel frames (from_mel, when /mel was
  // read whole). The stored sums are added to mel_sums_, which check_mel_statistics compares
  // with the manifest. frames: /mel's length, -1 when unknown (then the total is unknown too).
  void check_mel_sums(hid_t file, const std::string& label, int64_t n_mels, int64_t frames,
                      const MelSums* from_mel) {
    const h5::Where where{(result_.dir / label).string(), ""};
    if (frames < 0) mel_sums_usable_ = false;  // the /mel checks report why
    bool has_sum = false, has_sum_sq = false;
    try {
      has_sum = h5::has_link(file, layout::mel_sum, where);
      has_sum_sq = h5::has_link(file, layout::mel_sum_sq, where);
    } catch (const CacheError& failure) {
      fault(label, -1, "", failure.what());
      mel_sums_usable_ = false;
      return;
    }
    if (!has_sum && !has_sum_sq) {
      shards_without_sums_.push_back(label);
      return;
    }
    if (!has_sum || !has_sum_sq) {
      fault(label, -1, "",
            std::string("has /") + (has_sum ? layout::mel_sum : layout::mel_sum_sq) +
                " but not /" + (has_sum ? layout::mel_sum_sq : layout::mel_sum) +
                ": the shard is damaged");
      mel_sums_usable_ = false;
      return;
    }
    MelSums stored;
    stored.frames = frames;
    const Locator by_bin = [](int64_t first, int64_t) {
      return Location{-1, "", "bin " + std::to_string(first)};
    };
    auto collect = [](std::vector<double>& out) {
      return std::function<void(hsize_t, hsize_t, const double*)>(
          [&out](hsize_t, hsize_t count, const double* data) {
            out.insert(out.end(), data, data + count);
          });
    };
    const bool read_ok = read_numeric<double>(file, label, layout::mel_sum, H5T_NATIVE_DOUBLE,
                                              H5T_FLOAT, by_bin, collect(stored.sum))
                             .ok &
                         read_numeric<double>(file, label, layout::mel_sum_sq, H5T_NATIVE_DOUBLE,
                                              H5T_FLOAT, by_bin, collect(stored.sum_sq))
                             .ok;
    if (!read_ok) {
      mel_sums_usable_ = false;
      return;
    }
    for (auto [name, values] : {std::pair<const char*, const std::vector<double>*>{
                                    layout::mel_sum, &stored.sum},
                                {layout::mel_sum_sq, &stored.sum_sq}}) {
      if (static_cast<int64_t>(values->size()) != n_mels) {
        fault(label, -1, "",
              std::string("/") + name + " has " + std::to_string(values->size()) +
                  " values; n_mels is " + std::to_string(n_mels));
        mel_sums_usable_ = false;
        return;
      }
    }
    if (from_mel != nullptr) compare_sums_with_frames(label, stored, *from_mel);
    try {
      if (!mel_sums_) mel_sums_ = MelSums(n_mels);
      mel_sums_->add(stored);
    } catch (const CacheError&) {
      // Shards of different n_mels: reported by the n_mels checks.
      mel_sums_usable_ = false;
    }
  }

  // The stored sums must be those of the shard's /mel frames (summed while /mel was read).
  void compare_sums_with_frames(const std::string& label, const MelSums& stored, const MelSums& from_mel) {
    for (auto [name, values, expected] :
         {std::tuple<const char*, const std::vector<double>*, const std::vector<double>*>{
              layout::mel_sum, &stored.sum, &from_mel.sum},
          {layout::mel_sum_sq, &stored.sum_sq, &from_mel.sum_sq}}) {
      int64_t differing = 0, first = -1;
      for (size_t b = 0; b < values->size(); ++b) {
        // Same frames, same order, same double arithmetic as the writer: equal up to rounding.
        if (std::fabs((*values)[b] - (*expected)[b]) >
            1e-9 * std::max({1.0, std::fabs((*values)[b]), std::fabs((*expected)[b])})) {
          if (first < 0) first = static_cast<int64_t>(b);
          ++differing;
        }
      }
      if (differing > 0) {
        std::ostringstream problem;
        problem << std::setprecision(17) << "/" << name << "[" << first << "] is "
                << (*values)[first] << " but the frames of /mel give " << (*expected)[first]
                << " (" << differing << " of " << values->size()
                << " bins differ): the stored sums do not describe this shard's frames; "
                   "rebuild the shard with `sluice prep`";
        fault(label, -1, "", problem.str());
      }
    }
  }

  // The manifest's "mel_statistics" (optional) must be what the shards' sums give.
  void check_mel_statistics(const Manifest& m) {
    const std::string label = Manifest::file_name;
    if (!m.mel_statistics) {
      result_.notes.push_back(
          "manifest.json has no mel_statistics (per-bin mean and std for normalisation): the "
          "cache was written before they existed; re-running `sluice prep` writes them");
      return;
    }
    if (!shards_without_sums_.empty()) {
      fault(label, -1, "",
            "has mel_statistics, but " + shards_without_sums_.front() +
                (shards_without_sums_.size() > 1
                     ? " and " + std::to_string(shards_without_sums_.size() - 1) + " more shards"
                     : std::string()) +
                " have no /mel_sum, /mel_sum_sq to derive them from: a shard was replaced after "
                "the cache was built; re-run `sluice prep`");
      return;
    }
    if (!mel_sums_usable_ || !mel_sums_) return;  // the shard faults say why
    const MelStatistics& stated = *m.mel_statistics;
    const MelStatistics expected = mel_sums_->statistics();
    const std::string advice =
        ": manifest.json was changed after the cache was built; re-run `sluice prep` (it keeps "
        "complete shards) to rewrite it";
    if (stated.frames != expected.frames) {
      fault(label, -1, "",
            "mel_statistics.frames is " + std::to_string(stated.frames) +
                " but the shards hold " + std::to_string(expected.frames) + " frames" + advice);
    }
    for (auto [name, values, want] :
         {std::tuple<const char*, const std::vector<float>*, const std::vector<float>*>{
              "mean", &stated.mean, &expected.mean},
          {"std", &stated.stddev, &expected.stddev}}) {
      if (values->size() != want->size()) {
        fault(label, -1, "",
              std::string("mel_statistics.") + name + " has " + std::to_string(values->size()) +
                  " entries; the cache has " + std::to_string(want->size()) + " mel bins" + advice);
        continue;
      }
      int64_t differing = 0, first = -1;
      for (size_t b = 0; b < values->size(); ++b) {
        if (!nearly_equal((*values)[b], (*want)[b])) {
          if (first < 0) first = static_cast<int64_t>(b);
          ++differing;
        }
      }
      if (differing > 0) {
        std::ostringstream problem;
        problem << std::setprecision(9) << "mel_statistics." << name << "[" << first << "] is "
                << (*values)[first] << " but the shards' /mel_sum, /mel_sum_sq give "
                << (*want)[first] << " (" << differing << " of " << values->size()
                << " bins differ)" << advice;
        fault(label, -1, "", problem.str());
      }
    }
  }

  VerifyResult result_;
  IndexView index_;
  std::optional<MelSums> mel_sums_;  // the shards' stored sums, added up
  bool mel_sums_usable_ = true;      // false once a shard's sums could not be used
  std::vector<std::string> shards_without_sums_;  // written before per-bin statistics
};

std::string location(const VerifyFault& fault) {
  std::string text = fault.file;
  if (fault.row >= 0) text += " row " + std::to_string(fault.row);
  if (!fault.sample_id.empty()) text += " (sample '" + fault.sample_id + "')";
  return text;
}

}  // namespace

std::string VerifyResult::to_text() const {
  std::ostringstream out;
  out << "cache " << dir.string() << ": " << (ok() ? "OK" : "DAMAGED") << " - " << shards_checked
      << " shards, " << samples_checked << " samples, " << chunks_checked << " chunks ("
      << (bytes_checked / 1.0e6) << " MB) checked, " << faults.size() << " fault(s)\n";
  for (const VerifyFault& fault : faults) {
    out << "  FAULT " << location(fault) << ": " << fault.problem << "\n";
  }
  for (const std::string& note : notes) out << "  note: " << note << "\n";
  if (!ok()) {
    out << "Rebuild the damaged shards: delete them (and manifest.json) and run `sluice prep` "
           "again; it keeps the shards that are complete.\n";
  }
  return out.str();
}

nlohmann::json VerifyResult::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const VerifyFault& fault : faults) {
    list.push_back({{"file", fault.file},
                    {"row", fault.row},
                    {"sample_id", fault.sample_id},
                    {"problem", fault.problem}});
  }
  return {{"dir", dir.string()},
          {"ok", ok()},
          {"shards_checked", shards_checked},
          {"samples_checked", samples_checked},
          {"chunks_checked", chunks_checked},
          {"bytes_checked", bytes_checked},
          {"faults", list},
          {"notes", notes}};
}

VerifyResult verify_cache(const fs::path& dir) { return Verifier(dir).run(); }

VerifyResult verify_shard(const fs::path& shard_file, const std::string& expected_fingerprint) {
  return Verifier(shard_file.parent_path()).run_shard(shard_file, expected_fingerprint);
}

}  // namespace sluice::cache
