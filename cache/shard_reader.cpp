#include "cache/shard_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cache/float16.h"
#include "cache/hdf5_handle.h"
#include "cache/shard_layout.h"
#include "common/error.h"
#include "common/log.h"

namespace sluice::cache {
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> read_offsets(const h5::Dataset& dataset, int64_t rows, hsize_t data_rows,
                                  const h5::Where& at) {
  std::vector<hsize_t> dims = h5::extent(dataset, at);
  if (dims.size() != 1 || static_cast<int64_t>(dims[0]) != rows + 1) {
    throw CacheError(at.describe() + " should hold " + std::to_string(rows + 1) +
                     " offsets (rows + 1); the shard is damaged: run `sluice cache verify`");
  }
  std::vector<int64_t> offsets(dims[0]);
  h5::read_rows(dataset, H5T_NATIVE_INT64, 0, dims[0], offsets.data(), at);
  bool ok = offsets.front() == 0 && offsets.back() == static_cast<int64_t>(data_rows);
  for (size_t i = 1; ok && i < offsets.size(); ++i) ok = offsets[i] >= offsets[i - 1];
  if (!ok) {
    throw CacheError(at.describe() + " is not a monotonic 0.." + std::to_string(data_rows) +
                     " sequence; the shard is damaged: run `sluice cache verify`");
  }
  return offsets;
}

}  // namespace

struct ShardReader::Impl {
  ShardInfo info;
  h5::Where where;
  h5::File file;
  h5::Dataset mel, tokens;
  int64_t rows = 0;
  std::vector<int64_t> mel_offsets, token_offsets;  // loaded when opened: n + 1 each
  // How /mel is read (read_mel_pieces), fastest first:
  //  addressed: each chunk is read with one pread(2) at its address from /mel_chunk_addresses
  //          (checked against HDF5's chunk index when opened);
  //  direct: each chunk is read as stored with H5Dread_chunk;
  //  (both verify every chunk's fletcher32 themselves, as HDF5's filter would)
  //  hdf5:   H5Dread through HDF5's filter pipeline (gzip, foreign layouts, big-endian hosts).
  //
  // Why pread and not mmap (this path mapped the file until issue 17): a shard truncated or
  // rewritten in place while a run reads it turns every access to a mapped page past the new end
  // into SIGBUS, which kills the process with no file named, in whichever thread touched it. A
  // SIGBUS handler with siglongjmp would have to jump out of the caller's consume() (skipping
  // C++ destructors) and is process-wide state. pread instead returns fewer bytes than asked,
  // which becomes an error naming the shard. Its cost is one copy of each 40 KiB chunk into a
  // buffer that stays in the L2 cache, where the checksum and consume() then read it
  // (docs/cache-format.md has the measured rates).
  enum class MelPath { hdf5, direct, addressed } mel_path = MelPath::hdf5;
  hsize_t mel_chunk_rows = 0;
  size_t chunk_values = 0;                  // values of data in one chunk
  size_t value_bytes = sizeof(float);       // 2: /mel is IEEE float16 (shard format_version 2)
  mutable std::vector<float> chunk_buffer;  // direct, addressed: one stored chunk (data, 4-byte checksum)
  mutable std::vector<float> widened;       // float16: the checked chunk as floats, for consume()
  std::vector<uint64_t> chunk_addresses;    // addressed: file address of each /mel chunk
  int fd = -1;                              // addressed: the shard, open read-only

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  // addressed: the stored bytes of the chunk at `address` into chunk_buffer. A short read means
  // the file is now shorter than when it was opened (truncated, or replaced in place).
  const float* read_addressed_chunk(uint64_t address, hsize_t chunk_first, const h5::Where& at) const {
    const size_t stored = chunk_values * value_bytes + 4;
    auto* into = reinterpret_cast<uint8_t*>(chunk_buffer.data());
    size_t done = 0;
    while (done < stored) {
      const ssize_t n = ::pread(fd, into + done, stored - done, static_cast<off_t>(address + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string why = n < 0 ? std::strerror(errno) : "the file ends there";
        throw CacheError(at.describe() + ": cannot read the chunk of frames " + std::to_string(chunk_first) + ".." +
                         std::to_string(chunk_first + mel_chunk_rows - 1) + " at byte " + std::to_string(address + done) +
                         " (" + why + "): the shard was truncated or changed after it was opened. Run `sluice cache "
                         "verify " + info.path.parent_path().string() + "` and rerun `sluice prep` to rebuild it");
      }
      done += static_cast<size_t>(n);
    }
    return chunk_buffer.data();
  }

  // Checks the chunk of /mel starting at frame chunk_first: `bytes` holds its data and checksum.
  void verify_chunk(const uint8_t* bytes, hsize_t chunk_first, const h5::Where& at) const {
    const size_t data_bytes = chunk_values * value_bytes;
    // The fletcher32 filter appends its checksum little-endian; HDF5 also accepts the
    // byte-swapped form written by releases before 1.6.3, and so does this check.
    const uint32_t expected = static_cast<uint32_t>(bytes[data_bytes]) |
                              static_cast<uint32_t>(bytes[data_bytes + 1]) << 8 |
                              static_cast<uint32_t>(bytes[data_bytes + 2]) << 16 |
                              static_cast<uint32_t>(bytes[data_bytes + 3]) << 24;
    const uint32_t computed = h5::fletcher32(bytes, data_bytes);
    const uint32_t swapped = ((computed & 0x00ff00ffu) << 8) | ((computed >> 8) & 0x00ff00ffu);
    if (computed != expected && swapped != expected) {
      throw CacheError(at.describe() +
                       ": data error detected by Fletcher32 checksum in the chunk "
                       "of frames " +
                       std::to_string(chunk_first) + ".." +
                       std::to_string(chunk_first + mel_chunk_rows - 1));
    }
  }

  // Switches /mel to the addressed path when /mel_chunk_addresses is there and right.
  void use_chunk_addresses() {
    const h5::Where at = where.with(std::string("/") + layout::mel_chunk_addresses);
    h5::Dataset table = open(layout::mel_chunk_addresses);
    const hsize_t frames = h5::extent(mel, where.with("/mel")).at(0);
    const size_t chunks = static_cast<size_t>((frames + mel_chunk_rows - 1) / mel_chunk_rows);
    const std::vector<hsize_t> dims = h5::extent(table, at);
    if (dims.size() != 1 || dims[0] != chunks) {
      throw CacheError(at.describe() + " has the wrong length for /mel's " +
                       std::to_string(chunks) + " chunks");
    }
    chunk_addresses.resize(chunks);
    h5::read_rows(table, H5T_NATIVE_UINT64, 0, chunks, chunk_addresses.data(), at);
    const uint64_t stored = chunk_values * value_bytes + 4;
    const uint64_t file_bytes = fs::file_size(info.path);
    for (uint64_t address : chunk_addresses) {
      if (address % value_bytes != 0 || address > file_bytes || file_bytes - address < stored) {
        throw CacheError(at.describe() + " holds an address outside the file or unaligned");
      }
    }
    // The table is derived from HDF5's chunk index when the shard is written; a rewritten file
    // (h5repack, an in-place edit) moves chunks, which these spot checks catch.
    for (size_t c : {size_t{0}, chunks / 2, chunks - 1}) {
      if (chunks == 0) break;
      const hsize_t offset[2] = {c * mel_chunk_rows, 0};
      const h5::ChunkPlace place = h5::chunk_place(mel, offset, where.with("/mel"));
      if (place.address != chunk_addresses[c] || place.bytes != stored || place.filter_mask != 0) {
        throw CacheError(at.describe() + " disagrees with HDF5's chunk index at chunk " +
                         std::to_string(c) + " (was the file rewritten, e.g. by h5repack?)");
      }
    }
    fd = ::open(info.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw CacheError("cannot open " + where.file + ": " + std::strerror(errno));
    mel_path = MelPath::addressed;
  }

  h5::Dataset open(const char* name) const {
    return h5::open_dataset(file.id(), name, where.with(std::string("/") + name));
  }

  void check_row_range(int64_t first, int64_t count) const {
    if (first < 0 || count < 0 || first + count > rows) {
      throw CacheError("rows " + std::to_string(first) + ".." + std::to_string(first + count) +
                       " are outside " + info.path.string() + ", which has " +
                       std::to_string(rows) + " rows");
    }
  }

  std::vector<std::string> strings(const char* name, hsize_t first, hsize_t count) const {
    h5::Dataset dataset = open(name);
    return h5::read_string_rows(dataset, first, count, where.with(std::string("/") + name));
  }

  std::vector<std::string> all_strings(const char* name) const {
    h5::Dataset dataset = open(name);
    const h5::Where at = where.with(std::string("/") + name);
    std::vector<hsize_t> dims = h5::extent(dataset, at);
    return h5::read_string_rows(dataset, 0, dims.at(0), at);
  }
};

ShardReader::ShardReader(fs::path path, int64_t chunk_cache_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.info.path = std::move(path);
  s.where = h5::Where{s.info.path.string(), ""};
  auto held = h5::lock();
  std::error_code error;
  if (!fs::is_regular_file(s.info.path, error)) {
    throw CacheError("shard " + s.info.path.string() +
                     " does not exist; rebuild the cache with `sluice prep` (it skips the "
                     "shards that are complete)");
  }
  s.file = h5::open_file(s.where.file);
  const hid_t root = s.file.id();
  std::string format = h5::has_attribute(root, layout::attr_format, s.where)
                           ? h5::read_string_attribute(root, layout::attr_format, s.where)
                           : std::string();
  if (format != layout::shard_format) {
    throw CacheError(s.where.file + " is not a sluice shard (attribute format is '" + format +
                     "', expected '" + layout::shard_format + "')");
  }
  s.info.format_version = h5::read_int_attribute(root, layout::attr_format_version, s.where);
  if (s.info.format_version != layout::shard_format_version &&
      s.info.format_version != layout::shard_format_version_float16) {
    throw CacheError(s.where.file + " has shard format_version " +
                     std::to_string(s.info.format_version) + "; this sluice reads versions " +
                     std::to_string(layout::shard_format_version) + " and " +
                     std::to_string(layout::shard_format_version_float16) +
                     ": rebuild the cache with this sluice's `sluice prep`");
  }
  s.info.fingerprint = h5::read_string_attribute(root, layout::attr_fingerprint, s.where);
  s.info.shard = h5::read_int_attribute(root, layout::attr_shard, s.where);
  s.info.n_mels = h5::read_int_attribute(root, layout::attr_n_mels, s.where);
  s.info.strings_xxh64 = h5::read_string_attribute(root, layout::attr_strings_xxh64, s.where);

  s.mel = h5::open_dataset(root, layout::mel, s.where.with("/mel"), chunk_cache_bytes);
  s.tokens = s.open(layout::tokens);
  std::vector<hsize_t> mel_dims = h5::extent(s.mel, s.where.with("/mel"));
  if (mel_dims.size() != 2 || static_cast<int64_t>(mel_dims[1]) != s.info.n_mels) {
    throw CacheError(s.where.file + ": /mel is not [frames, n_mels=" +
                     std::to_string(s.info.n_mels) + "]; the shard is damaged");
  }
  {
    const h5::Where at = s.where.with("/mel");
    const std::vector<hsize_t> chunk = h5::chunk_shape(s.mel, at);
    const uint16_t probe = 1;
    const bool little_endian_host = *reinterpret_cast<const uint8_t*>(&probe) == 1;
    const bool direct =
        little_endian_host && chunk.size() == 2 && chunk[0] > 0 &&
        static_cast<int64_t>(chunk[1]) == s.info.n_mels &&
        h5::filters(s.mel, at) == std::vector<H5Z_filter_t>{H5Z_FILTER_FLETCHER32};
    // float16 chunks are checked as stored and widened here (cache/float16.h): HDF5's own
    // conversion of a 2-byte float reads at ~1% of this path's rate (docs/cache-format.md).
    const bool half = h5::stored_type_is(s.mel, h5::ieee_f16le(), at);
    if (direct && (half || h5::stored_type_is(s.mel, H5T_IEEE_F32LE, at))) {
      s.mel_path = Impl::MelPath::direct;
      s.value_bytes = half ? sizeof(uint16_t) : sizeof(float);
      if (half) s.widened.resize(static_cast<size_t>(chunk[0] * chunk[1]));
      s.mel_chunk_rows = chunk[0];
      s.chunk_values = static_cast<size_t>(chunk[0] * chunk[1]);
      s.chunk_buffer.resize(s.chunk_values + 1);
      if (h5::has_link(s.file.id(), layout::mel_chunk_addresses, s.where)) {
        try {
          s.use_chunk_addresses();
        } catch (const CacheError& failure) {
          log::get("cache")->warn("{}; reading /mel through HDF5 instead (slower)", failure.what());
        }
      }
    }
  }
  std::vector<hsize_t> token_dims = h5::extent(s.tokens, s.where.with("/tokens"));
  h5::Dataset seconds = s.open(layout::seconds);
  s.rows = static_cast<int64_t>(h5::extent(seconds, s.where.with("/seconds")).at(0));
  s.mel_offsets =
      read_offsets(s.open(layout::mel_offsets), s.rows, mel_dims[0], s.where.with("/mel_offsets"));
  s.token_offsets = read_offsets(s.open(layout::token_offsets), s.rows, token_dims.at(0),
                                 s.where.with("/token_offsets"));
}

ShardReader::ShardReader(ShardReader&&) noexcept = default;
ShardReader& ShardReader::operator=(ShardReader&&) noexcept = default;
ShardReader::~ShardReader() = default;  // handles lock while they close

const ShardInfo& ShardReader::info() const { return impl_->info; }
int64_t ShardReader::size() const { return impl_->rows; }
const std::vector<int64_t>& ShardReader::mel_offsets() const { return impl_->mel_offsets; }
const std::vector<int64_t>& ShardReader::token_offsets() const { return impl_->token_offsets; }

void ShardReader::read_mel(int64_t first, int64_t count, float* out) const {
  const Impl& s = *impl_;
  if (s.mel_path == Impl::MelPath::hdf5) {
    s.check_row_range(first, count);
    auto held = h5::lock();
    const int64_t begin = s.mel_offsets[first];
    const int64_t end = s.mel_offsets[first + count];
    h5::read_rows(s.mel, H5T_NATIVE_FLOAT, static_cast<hsize_t>(begin),
                  static_cast<hsize_t>(end - begin), out, s.where.with("/mel"));
    return;
  }
  const size_t row_values = static_cast<size_t>(s.info.n_mels);
  read_mel_pieces(first, count, [&](const float* frames, int64_t n_frames) {
    std::memcpy(out, frames, static_cast<size_t>(n_frames) * row_values * sizeof(float));
    out += static_cast<size_t>(n_frames) * row_values;
  });
}

void ShardReader::read_mel_pieces(int64_t first, int64_t count,
                                  const std::function<void(const float*, int64_t)>& consume) const {
  const Impl& s = *impl_;
  s.check_row_range(first, count);
  const hsize_t begin = static_cast<hsize_t>(s.mel_offsets[first]);
  const hsize_t end = static_cast<hsize_t>(s.mel_offsets[first + count]);
  if (begin == end) return;
  auto held = h5::lock();
  const h5::Where at = s.where.with("/mel");
  if (s.mel_path == Impl::MelPath::hdf5) {
    std::vector<float> frames((end - begin) * static_cast<hsize_t>(s.info.n_mels));
    h5::read_rows(s.mel, H5T_NATIVE_FLOAT, begin, end - begin, frames.data(), at);
    consume(frames.data(), static_cast<int64_t>(end - begin));
    return;
  }
  const hsize_t chunk_rows = s.mel_chunk_rows;
  const size_t row_values = static_cast<size_t>(s.info.n_mels);
  const size_t data_bytes = s.chunk_values * s.value_bytes;
  for (hsize_t chunk_first = begin / chunk_rows * chunk_rows; chunk_first < end;
       chunk_first += chunk_rows) {
    const float* chunk = nullptr;
    if (s.mel_path == Impl::MelPath::addressed) {
      chunk = s.read_addressed_chunk(s.chunk_addresses[chunk_first / chunk_rows], chunk_first, at);
    } else {
      const hsize_t offset[2] = {chunk_first, 0};
      uint32_t filter_mask = 0;
      const size_t stored =
          h5::read_raw_chunk(s.mel, offset, s.chunk_buffer.data(), data_bytes + 4, filter_mask, at);
      if (stored != data_bytes + 4 || filter_mask != 0) {
        throw CacheError("the chunk of " + at.describe() + " at frame " +
                         std::to_string(chunk_first) + " is stored with " + std::to_string(stored) +
                         " bytes and filter mask " + std::to_string(filter_mask) + "; expected " +
                         std::to_string(data_bytes + 4) + " and 0: the file is damaged");
      }
      chunk = s.chunk_buffer.data();
    }
    s.verify_chunk(reinterpret_cast<const uint8_t*>(chunk), chunk_first, at);
    const hsize_t lo = std::max(begin, chunk_first);
    const hsize_t hi = std::min(end, chunk_first + chunk_rows);
    if (s.value_bytes == sizeof(uint16_t)) {  // widens the rows consume() gets
      const size_t from = (lo - chunk_first) * row_values;
      halves_to_floats(reinterpret_cast<const uint16_t*>(chunk) + from, s.widened.data() + from,
                       (hi - lo) * row_values);
      chunk = s.widened.data();
    }
    consume(chunk + (lo - chunk_first) * row_values, static_cast<int64_t>(hi - lo));
  }
}

void ShardReader::read_tokens(int64_t first, int64_t count, int32_t* out) const {
  const Impl& s = *impl_;
  s.check_row_range(first, count);
  auto held = h5::lock();
  const int64_t begin = s.token_offsets[first];
  const int64_t end = s.token_offsets[first + count];
  h5::read_rows(s.tokens, H5T_NATIVE_INT32, static_cast<hsize_t>(begin),
                static_cast<hsize_t>(end - begin), out, s.where.with("/tokens"));
}

ShardRow ShardReader::read(int64_t row) const {
  const Impl& s = *impl_;
  s.check_row_range(row, 1);
  auto held = h5::lock();
  ShardRow result;
  result.n_frames = s.mel_offsets[row + 1] - s.mel_offsets[row];
  result.mel.resize(static_cast<size_t>(result.n_frames * s.info.n_mels));
  read_mel(row, 1, result.mel.data());
  result.tokens.resize(static_cast<size_t>(s.token_offsets[row + 1] - s.token_offsets[row]));
  read_tokens(row, 1, result.tokens.data());
  const hsize_t r = static_cast<hsize_t>(row);
  result.id = s.strings(layout::id, r, 1).at(0);
  result.text = s.strings(layout::text, r, 1).at(0);
  result.language = s.strings(layout::language, r, 1).at(0);
  result.speaker = s.strings(layout::speaker, r, 1).at(0);
  h5::Dataset seconds = s.open(layout::seconds);
  h5::read_rows(seconds, H5T_NATIVE_DOUBLE, r, 1, &result.seconds, s.where.with("/seconds"));
  return result;
}

std::optional<MelSums> ShardReader::read_mel_sums() const {
  const Impl& s = *impl_;
  auto held = h5::lock();
  const bool has_sum = h5::has_link(s.file.id(), layout::mel_sum, s.where);
  const bool has_sum_sq = h5::has_link(s.file.id(), layout::mel_sum_sq, s.where);
  if (!has_sum && !has_sum_sq) return std::nullopt;  // written before per-bin statistics
  if (!has_sum || !has_sum_sq) {
    throw CacheError(s.where.file + " has /" + (has_sum ? layout::mel_sum : layout::mel_sum_sq) +
                     " but not /" + (has_sum ? layout::mel_sum_sq : layout::mel_sum) +
                     "; the shard is damaged: run `sluice cache verify` and rebuild it with "
                     "`sluice prep`");
  }
  MelSums sums(s.info.n_mels);
  sums.frames = s.mel_offsets.back();
  for (auto [name, values] :
       {std::pair<const char*, std::vector<double>*>{layout::mel_sum, &sums.sum},
        {layout::mel_sum_sq, &sums.sum_sq}}) {
    const h5::Where at = s.where.with(std::string("/") + name);
    h5::Dataset dataset = s.open(name);
    const std::vector<hsize_t> dims = h5::extent(dataset, at);
    if (dims.size() != 1 || static_cast<int64_t>(dims[0]) != s.info.n_mels) {
      throw CacheError(at.describe() + " should hold n_mels = " + std::to_string(s.info.n_mels) +
                       " values; the shard is damaged: run `sluice cache verify` and rebuild it "
                       "with `sluice prep`");
    }
    h5::read_rows(dataset, H5T_NATIVE_DOUBLE, 0, dims[0], values->data(), at);
  }
  return sums;
}

ShardColumns ShardReader::read_columns() const {
  const Impl& s = *impl_;
  auto held = h5::lock();
  ShardColumns columns;
  columns.ids = s.all_strings(layout::id);
  columns.languages = s.all_strings(layout::language);
  columns.speakers = s.all_strings(layout::speaker);
  columns.rejects = s.all_strings(layout::rejects);
  columns.seconds.resize(static_cast<size_t>(s.rows));
  h5::Dataset seconds = s.open(layout::seconds);
  h5::read_rows(seconds, H5T_NATIVE_DOUBLE, 0, columns.seconds.size(), columns.seconds.data(),
                s.where.with("/seconds"));
  const size_t rows = static_cast<size_t>(s.rows);
  if (columns.ids.size() != rows || columns.languages.size() != rows ||
      columns.speakers.size() != rows) {
    throw CacheError(s.where.file +
                     ": /id, /language, /speaker and /seconds differ in length; "
                     "the shard is damaged: run `sluice cache verify`");
  }
  columns.n_frames.resize(rows);
  columns.n_tokens.resize(rows);
  for (size_t i = 0; i < rows; ++i) {
    columns.n_frames[i] = static_cast<int32_t>(s.mel_offsets[i + 1] - s.mel_offsets[i]);
    columns.n_tokens[i] = static_cast<int32_t>(s.token_offsets[i + 1] - s.token_offsets[i]);
  }
  return columns;
}

std::vector<std::string> ShardReader::read_texts() const {
  auto held = h5::lock();
  return impl_->all_strings(layout::text);
}

std::vector<int32_t> ShardReader::read_all_tokens() const {
  const Impl& s = *impl_;
  std::vector<int32_t> tokens(static_cast<size_t>(s.token_offsets.back()));
  read_tokens(0, s.rows, tokens.data());
  return tokens;
}

std::string shard_file_name(int64_t shard_number) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05lld.h5", static_cast<long long>(shard_number));
  return name;
}

int64_t parse_shard_file_name(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string prefix = "shard-";
  const std::string suffix = ".h5";
  if (name.size() < prefix.size() + 5 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 15) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  const int64_t number = std::stoll(digits);
  return shard_file_name(number) == name ? number : -1;  // canonical spelling only
}

bool is_complete_shard(const fs::path& path, const std::string& expected_fingerprint) {
  const int64_t number = parse_shard_file_name(path);
  if (number < 0) return false;
  try {
    auto held = h5::lock();
    std::error_code error;
    if (!fs::is_regular_file(path, error)) return false;
    const h5::Where where{path.string(), ""};
    h5::File file = h5::open_file(path.string());
    const hid_t root = file.id();
    for (const char* name :
         {layout::attr_format, layout::attr_format_version, layout::attr_fingerprint,
          layout::attr_shard, layout::attr_strings_xxh64}) {
      if (!h5::has_attribute(root, name, where)) return false;
    }
    const bool matches =
        h5::read_string_attribute(root, layout::attr_format, where) == layout::shard_format &&
        // Either version: the fingerprint already says float32 or float16 (cache.mel_dtype).
        (h5::read_int_attribute(root, layout::attr_format_version, where) == layout::shard_format_version ||
         h5::read_int_attribute(root, layout::attr_format_version, where) ==
             layout::shard_format_version_float16) &&
        h5::read_int_attribute(root, layout::attr_shard, where) == number &&
        h5::read_string_attribute(root, layout::attr_fingerprint, where) == expected_fingerprint;
    if (!matches) return false;
    for (const char* name : {layout::mel_sum, layout::mel_sum_sq}) {
      if (!h5::has_link(root, name, where)) {
        log::get("cache")->info("{} has no /{} (written before per-bin mel statistics): it is "
                                "rewritten",
                                path.string(), name);
        return false;
      }
    }
    return true;
  } catch (const std::exception& error) {
    log::get("cache")->debug("{} is not a complete shard: {}", path.string(), error.what());
    return false;
  }
}

}  // namespace sluice::cache
