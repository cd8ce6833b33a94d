#pragma once
// INTERNAL to cache/: the names inside shard and index files and the strings digest, shared by
// the writer, the readers and the verifier. docs/cache-format.md is the description for people;
// this file is the one place the code spells it.
#include <xxhash.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace sluice::cache::layout {

inline constexpr const char* shard_format = "sluice-shard";
inline constexpr int64_t shard_format_version = 1;
// A shard whose /mel is IEEE float16 (cache.mel_dtype: float16); version 1 shards hold float32.
inline constexpr int64_t shard_format_version_float16 = 2;
inline constexpr const char* index_format = "sluice-index";
inline constexpr int64_t index_format_version = 1;

// Root attributes.
inline constexpr const char* attr_format = "format";
inline constexpr const char* attr_format_version = "format_version";
inline constexpr const char* attr_fingerprint = "fingerprint";
inline constexpr const char* attr_shard = "shard";
inline constexpr const char* attr_n_mels = "n_mels";
inline constexpr const char* attr_strings_xxh64 = "strings_xxh64";

// Shard datasets.
inline constexpr const char* mel = "mel";
inline constexpr const char* mel_offsets = "mel_offsets";
inline constexpr const char* tokens = "tokens";
inline constexpr const char* token_offsets = "token_offsets";
inline constexpr const char* id = "id";
inline constexpr const char* text = "text";
inline constexpr const char* language = "language";
inline constexpr const char* speaker = "speaker";
inline constexpr const char* seconds = "seconds";
inline constexpr const char* rejects = "rejects";
// Optional (written when /mel's only filter is fletcher32): the file address of every /mel chunk,
// in chunk order, so readers can read chunks without asking HDF5's chunk index each time.
inline constexpr const char* mel_chunk_addresses = "mel_chunk_addresses";
// Optional (written by every shard writer since per-bin statistics; absent in older shards):
// float64 [n_mels], the sum and the sum of squares of each mel bin over all of /mel's frames.
// The manifest's "mel_statistics" is derived from them (cache/mel_statistics.h).
inline constexpr const char* mel_sum = "mel_sum";
inline constexpr const char* mel_sum_sq = "mel_sum_sq";
// Chunks (and other objects of 1 KiB or more) start at multiples of this many bytes, so a chunk
// read into memory whole (or mapped by another reader) is aligned for float access.
inline constexpr uint64_t file_alignment = 64;
// The string datasets of a shard, in the order strings_xxh64 covers them.
inline constexpr std::array<const char*, 5> shard_string_columns = {id, text, language, speaker,
                                                                    rejects};

// Index datasets (id, seconds, language and speaker share the shard names).
inline constexpr const char* index_shard = "shard";
inline constexpr const char* index_row = "row";
inline constexpr const char* index_n_frames = "n_frames";
inline constexpr const char* index_n_tokens = "n_tokens";

// Chunk length (rows) of a 1-D column: ~64 KiB per chunk, never more rows than the column has
// (an empty column still needs a chunk of 1).
inline uint64_t column_chunk_rows(uint64_t rows, uint64_t element_bytes) {
  uint64_t target = (64 * 1024) / element_bytes;
  return rows == 0 ? 1 : (rows < target ? rows : target);
}

// XXH64 (seed 0) over string columns, in a defined byte stream: for each column, in order,
//   the column's name bytes, one 0x00 byte, its number of strings as uint64 little-endian,
//   then for each string: its byte length as uint64 little-endian, then its UTF-8 bytes.
// Lengths make the stream unambiguous (["ab","c"] and ["a","bc"] differ). hex() is the canonical
// (big-endian) 16 lowercase hex digits, as Python's xxhash.xxh64(stream).hexdigest() prints.
class StringsDigest {
 public:
  StringsDigest() : state_(XXH64_createState(), XXH64_freeState) { XXH64_reset(state_.get(), 0); }

  void begin_column(const std::string& name, uint64_t count) {
    XXH64_update(state_.get(), name.data(), name.size());
    const char zero = 0;
    XXH64_update(state_.get(), &zero, 1);
    add_u64(count);
  }
  void add(const std::string& value) {
    add_u64(value.size());
    XXH64_update(state_.get(), value.data(), value.size());
  }
  std::string hex() const {
    XXH64_canonical_t canonical;
    XXH64_canonicalFromHash(&canonical, XXH64_digest(state_.get()));
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char byte : canonical.digest) {
      out += digits[byte >> 4];
      out += digits[byte & 15];
    }
    return out;
  }

 private:
  void add_u64(uint64_t value) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
    XXH64_update(state_.get(), bytes, 8);
  }

  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state_;
};

}  // namespace sluice::cache::layout
