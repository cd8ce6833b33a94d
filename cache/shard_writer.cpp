#include "cache/shard_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <system_error>
#include <vector>

#include "cache/durable_file.h"
#include "cache/float16.h"
#include "cache/hdf5_handle.h"
#include "cache/mel_statistics.h"
#include "cache/shard_layout.h"
#include "common/error.h"
#include "common/finite.h"
#include "common/log.h"

namespace sluice::cache {
namespace fs = std::filesystem;

struct ShardWriter::Impl {
  fs::path final_path;
  fs::path temporary_path;
  int shard = 0;
  int n_mels = 0;
  std::string fingerprint;
  ShardWriterOptions options;
  h5::Where where;

  h5::File file;
  h5::Dataset mel;
  // The /mel chunk being filled: chunk_frames x n_mels floats and one float's room for the
  // checksum after them, so that a full chunk goes to the file as it is stored (data, then its
  // fletcher32 little-endian) with one direct chunk write.
  std::vector<float> pending;
  std::vector<uint16_t> pending_half;  // float16_mels: the pending chunk as stored, and its checksum
  std::vector<float> rounded;          // float16_mels: the appended sample's mels, rounded
  std::vector<uint16_t> rounded_half;  // float16_mels: the same as halves, on the way
  int64_t pending_rows = 0;    // rows of `pending` filled: fewer than one chunk between appends
  int64_t frames_written = 0;  // rows of /mel in the file
  bool committed = false;
  bool failed = false;  // an I/O error happened: the file is not trustworthy

  std::vector<int64_t> mel_offsets{0};
  std::vector<int64_t> token_offsets{0};
  std::vector<int32_t> tokens;
  std::vector<std::string> ids, texts, languages, speakers, rejects;
  std::vector<double> seconds;
  MelSums mel_sums;  // over every frame appended so far; /mel_sum and /mel_sum_sq at commit()

  size_t chunk_values() const { return static_cast<size_t>(options.chunk_frames) * n_mels; }

  // Writes the pending rows as the next chunk of /mel: a whole chunk, or the last partial one at
  // commit(). Without deflate the writer does the filter's work itself (HDF5's fletcher32 filter,
  // chunk cache and selection cost about as much as the write): the rows past the data are zero,
  // as HDF5 fills a partial edge chunk, and the checksum is h5::fletcher32's, bit-identical to the
  // filter's. With deflate the chunk goes through HDF5's pipeline.
  void write_pending_chunk() {
    const h5::Where at = where.with("/mel");
    const int64_t rows = pending_rows;
    h5::set_extent(mel, {static_cast<hsize_t>(frames_written + rows), static_cast<hsize_t>(n_mels)}, at);
    if (options.float16_mels) {
      write_pending_half_chunk(rows, at);
    } else if (options.gzip_level > 0) {
      h5::write_rows(mel, H5T_NATIVE_FLOAT, static_cast<hsize_t>(frames_written),
                     static_cast<hsize_t>(rows), pending.data(), at);
    } else {
      const size_t values = chunk_values();
      std::fill(pending.begin() + rows * n_mels, pending.begin() + static_cast<std::ptrdiff_t>(values), 0.0f);
      const uint32_t checksum = h5::fletcher32(pending.data(), values * sizeof(float));
      auto* tail = reinterpret_cast<unsigned char*>(pending.data() + values);
      for (int byte = 0; byte < 4; ++byte) tail[byte] = static_cast<unsigned char>(checksum >> (8 * byte));
      const hsize_t offset[2] = {static_cast<hsize_t>(frames_written), 0};
      h5::write_raw_chunk(mel, offset, 0, pending.data(), values * sizeof(float) + 4, at);
    }
    frames_written += rows;
    pending_rows = 0;
  }

  // write_pending_chunk() for a float16 /mel: the same two ways, on the chunk converted to halves
  // (exact: the values were rounded at append).
  void write_pending_half_chunk(int64_t rows, const h5::Where& at) {
    const size_t values = chunk_values();
    const size_t filled = static_cast<size_t>(rows * n_mels);
    pending_half.resize(values + 2);  // + the checksum's 4 bytes
    floats_to_halves(pending.data(), pending_half.data(), filled);
    std::fill(pending_half.begin() + static_cast<std::ptrdiff_t>(filled), pending_half.end(), uint16_t{0});
    if (options.gzip_level > 0) {
      h5::write_rows(mel, h5::ieee_f16le(), static_cast<hsize_t>(frames_written), static_cast<hsize_t>(rows),
                     pending_half.data(), at);
      return;
    }
    const uint32_t checksum = h5::fletcher32(pending_half.data(), values * sizeof(uint16_t));
    auto* tail = reinterpret_cast<unsigned char*>(pending_half.data() + values);
    for (int byte = 0; byte < 4; ++byte) tail[byte] = static_cast<unsigned char>(checksum >> (8 * byte));
    const hsize_t offset[2] = {static_cast<hsize_t>(frames_written), 0};
    h5::write_raw_chunk(mel, offset, 0, pending_half.data(), values * sizeof(uint16_t) + 4, at);
  }

  // Copies frames into the pending chunk, writing each chunk as it fills: only whole chunks are
  // written before commit() (a partial chunk would be filtered and written twice).
  void push_frames(const float* data, int64_t rows) {
    const int64_t chunk = options.chunk_frames;
    while (rows > 0) {
      const int64_t take = std::min(rows, chunk - pending_rows);
      std::memcpy(pending.data() + pending_rows * n_mels, data, static_cast<size_t>(take * n_mels) * sizeof(float));
      pending_rows += take;
      data += take * n_mels;
      rows -= take;
      if (pending_rows == chunk) write_pending_chunk();
    }
  }

  void check_string(const std::string& value, const char* field, const std::string& id) const {
    if (value.find('\0') != std::string::npos) {
      throw CacheError("sample '" + id + "' for " + final_path.string() +
                       " has a NUL byte in its " + field +
                       "; HDF5 strings end at NUL: clean the corpus entry");
    }
  }

  template <class T>
  void write_column(const char* name, hid_t file_type, hid_t mem_type,
                    const std::vector<T>& values) {
    const h5::Where at = where.with(std::string("/") + name);
    h5::Dataset dataset = h5::create_chunked(file.id(), name, file_type, {values.size()},
                                             layout::column_chunk_rows(values.size(), sizeof(T)),
                                             options.gzip_level, at);
    h5::write_rows(dataset, mem_type, 0, values.size(), values.data(), at);
    dataset.close(at);
  }

  void write_strings(const char* name, const std::vector<std::string>& values) {
    const h5::Where at = where.with(std::string("/") + name);
    h5::Datatype type = h5::utf8_string_type();
    // A stored variable-length string is a 16-byte heap reference.
    h5::Dataset dataset =
        h5::create_chunked(file.id(), name, type.id(), {values.size()},
                           layout::column_chunk_rows(values.size(), 16), options.gzip_level, at);
    h5::write_string_rows(dataset, 0, values, at);
    dataset.close(at);
  }

  std::string strings_digest() const {
    layout::StringsDigest digest;
    const std::vector<std::string>* columns[] = {&ids, &texts, &languages, &speakers, &rejects};
    for (size_t c = 0; c < layout::shard_string_columns.size(); ++c) {
      digest.begin_column(layout::shard_string_columns[c], columns[c]->size());
      for (const std::string& value : *columns[c]) digest.add(value);
    }
    return digest.hex();
  }

  void write_everything() {
    if (pending_rows > 0) write_pending_chunk();
    pending = {};
    if (options.gzip_level == 0) {
      // Record where each /mel chunk landed (see layout::mel_chunk_addresses). Looking a chunk up
      // costs a walk of the chunk index in HDF5 1.10, so this is O(chunks^2): ~40 ms for a
      // 1000-sample shard of 128-frame chunks, once, at prep time.
      const h5::Where at = where.with("/mel");
      h5::flush(mel, at);
      const hsize_t chunk_rows = static_cast<hsize_t>(options.chunk_frames);
      std::vector<uint64_t> addresses(
          static_cast<size_t>((frames_written + options.chunk_frames - 1) / options.chunk_frames));
      for (size_t c = 0; c < addresses.size(); ++c) {
        const hsize_t offset[2] = {c * chunk_rows, 0};
        addresses[c] = h5::chunk_place(mel, offset, at).address;
      }
      write_column(layout::mel_chunk_addresses, H5T_STD_U64LE, H5T_NATIVE_UINT64, addresses);
    }
    mel.close(where.with("/mel"));
    write_column(layout::mel_offsets, H5T_STD_I64LE, H5T_NATIVE_INT64, mel_offsets);
    write_column(layout::tokens, H5T_STD_I32LE, H5T_NATIVE_INT32, tokens);
    write_column(layout::token_offsets, H5T_STD_I64LE, H5T_NATIVE_INT64, token_offsets);
    write_column(layout::seconds, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, seconds);
    write_column(layout::mel_sum, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, mel_sums.sum);
    write_column(layout::mel_sum_sq, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, mel_sums.sum_sq);
    write_strings(layout::id, ids);
    write_strings(layout::text, texts);
    write_strings(layout::language, languages);
    write_strings(layout::speaker, speakers);
    write_strings(layout::rejects, rejects);
    hid_t root = file.id();
    h5::write_attribute(root, layout::attr_format, std::string(layout::shard_format), where);
    h5::write_attribute(root, layout::attr_format_version,
                        options.float16_mels ? layout::shard_format_version_float16 : layout::shard_format_version,
                        where);
    h5::write_attribute(root, layout::attr_fingerprint, fingerprint, where);
    h5::write_attribute(root, layout::attr_shard, static_cast<int64_t>(shard), where);
    h5::write_attribute(root, layout::attr_n_mels, static_cast<int64_t>(n_mels), where);
    h5::write_attribute(root, layout::attr_strings_xxh64, strings_digest(), where);
    file.close(where);
  }

  void discard() noexcept {
    // After a failed write (a full disk) closing fails too: expected, so not a second warning.
    if (failed) {
      mel.abandon();
      file.abandon();
    } else {
      mel.reset();
      file.reset();
    }
    std::error_code error;
    if (fs::remove(temporary_path, error)) {
      try {
        log::get("cache")->warn("shard {} was not committed: removed {}", final_path.string(),
                                temporary_path.string());
      } catch (...) {
      }
    }
  }
};

ShardWriter::ShardWriter(fs::path final_path, int shard_number, int n_mels, std::string fingerprint,
                         ShardWriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.final_path = std::move(final_path);
  s.temporary_path = durable::temporary_name(s.final_path);
  s.shard = shard_number;
  s.n_mels = n_mels;
  s.fingerprint = std::move(fingerprint);
  s.options = options;
  s.where = h5::Where{s.temporary_path.string(), ""};
  const std::string target = "shard writer for " + s.final_path.string();
  if (shard_number < 0) throw CacheError(target + ": shard number must be >= 0");
  if (n_mels <= 0) throw CacheError(target + ": n_mels must be > 0");
  if (s.fingerprint.empty() || s.fingerprint.find('\0') != std::string::npos) {
    throw CacheError(target + ": fingerprint must be a non-empty string without NUL bytes");
  }
  if (options.chunk_frames <= 0) throw CacheError(target + ": chunk_frames must be > 0");
  if (options.gzip_level < 0 || options.gzip_level > 9) {
    throw CacheError(target + ": gzip_level must be 0 (off) to 9");
  }
  s.mel_sums = MelSums(n_mels);
  auto held = h5::lock();
  s.file = h5::create_file(s.temporary_path.string(), layout::file_alignment);
  s.mel = h5::create_chunked(
      s.file.id(), layout::mel, options.float16_mels ? h5::ieee_f16le() : H5T_IEEE_F32LE,
      {0, static_cast<hsize_t>(n_mels)},
      static_cast<hsize_t>(options.chunk_frames), options.gzip_level, s.where.with("/mel"));
  s.pending.assign(s.chunk_values() + 1, 0.0f);
}

ShardWriter::ShardWriter(ShardWriter&&) noexcept = default;

ShardWriter& ShardWriter::operator=(ShardWriter&& other) noexcept {
  if (this != &other) {
    if (impl_ && !impl_->committed) {
      auto held = h5::lock();
      impl_->discard();
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

ShardWriter::~ShardWriter() {
  if (!impl_ || impl_->committed) return;
  try {
    auto held = h5::lock();
    impl_->discard();
  } catch (...) {
    // lock() cannot realistically fail; a destructor must not throw regardless.
  }
}

void ShardWriter::append(const ShardSample& sample) {
  Impl& s = *impl_;
  if (s.committed) throw CacheError("append to " + s.final_path.string() + " after commit()");
  if (s.failed) throw CacheError("append to " + s.final_path.string() + " after a failed write");
  const std::string where = "sample '" + sample.id + "' for " + s.final_path.string();
  if (sample.id.empty())
    throw CacheError("a sample for " + s.final_path.string() + " has an empty id");
  s.check_string(sample.id, "id", sample.id);
  s.check_string(sample.text, "text", sample.id);
  s.check_string(sample.language, "language", sample.id);
  s.check_string(sample.speaker, "speaker", sample.id);
  if (sample.n_frames < 0 || sample.n_frames > INT32_MAX || sample.n_tokens < 0 ||
      sample.n_tokens > INT32_MAX) {
    throw CacheError(where + ": n_frames and n_tokens must be in 0..2^31-1");
  }
  if ((sample.n_frames > 0 && sample.mel == nullptr) ||
      (sample.n_tokens > 0 && sample.tokens == nullptr)) {
    throw CacheError(where + ": null mel or tokens pointer with a nonzero length");
  }
  // Checked before anything is written, so a refused sample leaves the shard as it was. A NaN or
  // infinity would also turn the bin's statistics (and the manifest's) into NaN.
  const int64_t values = sample.n_frames * s.n_mels;
  if (const int64_t v = first_non_finite(sample.mel, values); v < values) {
    throw CacheError(where + ": mel value at frame " + std::to_string(v / s.n_mels) + ", bin " +
                     std::to_string(v % s.n_mels) +
                     " is not finite; the feature extraction produced it: check the audio "
                     "and the features settings (features.log_floor must be > 0)");
  }
  const float* mel = sample.mel;
  if (s.options.float16_mels) {
    s.rounded.resize(static_cast<size_t>(values));
    s.rounded_half.resize(static_cast<size_t>(values));
    floats_to_halves(sample.mel, s.rounded_half.data(), static_cast<size_t>(values));
    halves_to_floats(s.rounded_half.data(), s.rounded.data(), static_cast<size_t>(values));
    if (const int64_t v = first_non_finite(s.rounded.data(), values); v < values) {
      throw CacheError(where + ": mel value " + std::to_string(sample.mel[v]) + " at frame " +
                       std::to_string(v / s.n_mels) + ", bin " + std::to_string(v % s.n_mels) +
                       " is outside float16's range (+-65504): set cache.mel_dtype: float32");
    }
    mel = s.rounded.data();
  }
  auto held = h5::lock();
  try {
    s.push_frames(mel, sample.n_frames);
  } catch (...) {
    s.failed = true;
    throw;
  }
  s.mel_sums.add_frames(mel, sample.n_frames);
  s.mel_offsets.push_back(s.mel_offsets.back() + sample.n_frames);
  s.tokens.insert(s.tokens.end(), sample.tokens, sample.tokens + sample.n_tokens);
  s.token_offsets.push_back(s.token_offsets.back() + sample.n_tokens);
  s.ids.push_back(sample.id);
  s.texts.push_back(sample.text);
  s.languages.push_back(sample.language);
  s.speakers.push_back(sample.speaker);
  s.seconds.push_back(sample.seconds);
}

void ShardWriter::add_reject(const std::string& json_line) {
  Impl& s = *impl_;
  if (s.committed) throw CacheError("add_reject to " + s.final_path.string() + " after commit()");
  if (json_line.find('\0') != std::string::npos || json_line.find('\n') != std::string::npos) {
    throw CacheError("a reject line for " + s.final_path.string() +
                     " contains a NUL or newline; pass one JSON object per line");
  }
  s.rejects.push_back(json_line);
}

void ShardWriter::commit() {
  Impl& s = *impl_;
  if (s.committed) throw CacheError("commit() of " + s.final_path.string() + " called twice");
  if (s.failed) throw CacheError("commit() of " + s.final_path.string() + " after a failed write");
  auto held = h5::lock();
  try {
    s.write_everything();
    durable::publish(s.temporary_path, s.final_path);
  } catch (...) {
    s.failed = true;
    throw;
  }
  s.committed = true;
  log::get("cache")->debug("committed {}: {} samples, {} frames, {} rejects", s.final_path.string(),
                           s.ids.size(), s.frames_written, s.rejects.size());
}

int64_t ShardWriter::size() const { return static_cast<int64_t>(impl_->ids.size()); }
const fs::path& ShardWriter::final_path() const { return impl_->final_path; }
const fs::path& ShardWriter::temporary_path() const { return impl_->temporary_path; }

int remove_shard_temporaries(const fs::path& dir) {
  int removed = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && name.find(".h5.tmp-") != std::string::npos &&
        entry.is_regular_file(error)) {
      if (fs::remove(entry.path(), error)) {
        ++removed;
        log::get("cache")->info("removed leftover temporary {}", entry.path().string());
      }
    }
  }
  return removed;
}

}  // namespace sluice::cache
