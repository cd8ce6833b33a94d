#pragma once
// Random access to a finished cache (docs/cache-format.md): what data ranks use to fill batches.
//
// open() reads manifest.json and index.h5 only (~a few ms for 13k samples); shard files are opened
// on first use and kept open for the reader's lifetime (one HDF5 file handle each).
//
// Thread-safety: the serial HDF5 build is not thread-safe, so every HDF5 call in sluice_cache
// (this reader, other readers, shard writers) holds one process-wide lock. read()/read_batch()
// may be called from several threads, but their I/O is serialised; size(), entry(), entries(),
// manifest() and mel_statistics() are immutable after open() and need no lock. For parallel
// decoding, keep reads on one I/O thread and parallelise the work done on the returned samples.
//
// Errors are CacheError: a missing or unfinished cache, a format version this build does not
// read, an index out of range, or a failed read (a chunk whose fletcher32 checksum does not
// match included); a read error names the shard file, the row, the sample id and what to do.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/mel_statistics.h"

namespace sluice::cache {

struct Sample {
  int64_t index = -1;  // position in the cache (index.h5 row)
  std::string id;
  int32_t n_frames = 0;
  int32_t n_mels = 0;
  std::vector<float> mel;  // n_frames x n_mels, row-major (frame-major)
  std::vector<int32_t> tokens;
};

// One row of index.h5.
struct IndexEntry {
  uint32_t shard = 0;  // global shard number: file shard-NNNNN.h5
  uint32_t row = 0;    // row inside that shard
  int32_t n_frames = 0;
  int32_t n_tokens = 0;
  float seconds = 0.0f;
  uint16_t language = 0;  // position in CacheReader::languages() (one cache: manifest()["languages"])
  uint32_t speaker = 0;   // position in CacheReader::speakers() (one cache: manifest()["speakers"])
  std::string id;
};

class CacheReader {
 public:
  // Reads dir/manifest.json and the index; checks format versions, that the index matches the
  // manifest (fingerprint, sample count) and that every entry points at a listed shard row.
  // chunk_cache_bytes: HDF5 chunk cache per shard's /mel (< 0: HDF5's default, 1 MiB).
  static CacheReader open(const std::filesystem::path& dir, int64_t chunk_cache_bytes = -1);

  // Several caches as one (train.mixture): one index space where cache c's sample i is
  // first_index(c) + i, in the order of `dirs`. The caches must hold the same features: the
  // settings prep made them with (features.*, text.*), the mel dtype, n_mels and the vocabulary
  // agree, or a ConfigError names both caches, the setting and both values. manifest() and dir()
  // are the first cache's (with "mixture" listing every cache's dir, fingerprint, size and shard_count);
  // mel_statistics() pools every cache's (weighted by its frames), nullptr unless each has them.
  // Languages and speakers are unified over the caches (entries() point into the unified tables):
  // a language is its code, the same in every cache ("fa" of one cache is "fa" of another); a
  // speaker belongs to its cache, so the caches' speakers follow one another in cache order (cache
  // c's speaker i is the sum of the caches' speakers before it + i), and a code two caches both
  // use is two speakers.
  static CacheReader open_mixture(const std::vector<std::filesystem::path>& dirs, int64_t chunk_cache_bytes = -1);
  // The caches of open_mixture() (one for open()), and where each one's indices begin.
  size_t corpora() const;
  int64_t first_index(size_t corpus) const;
  const std::filesystem::path& corpus_dir(size_t corpus) const;
  // The corpus of cache index `index` (0 for open()).
  size_t corpus_of(int64_t index) const;
  // The unified tables entries() point into (see open_mixture()): language codes, sorted; speaker
  // codes, cache after cache (each cache's sorted), and the corpus each speaker belongs to.
  const std::vector<std::string>& languages() const;
  const std::vector<std::string>& speakers() const;
  size_t speaker_corpus(uint32_t speaker) const;

  CacheReader(CacheReader&&) noexcept;
  CacheReader& operator=(CacheReader&&) noexcept;
  ~CacheReader();

  int64_t size() const;
  const IndexEntry& entry(int64_t index) const;  // CacheError when out of range
  const std::vector<IndexEntry>& entries() const;
  const nlohmann::json& manifest() const;
  const std::filesystem::path& dir() const;
  int32_t n_mels() const;
  // Per-mel-bin mean and std over every frame of the cache (manifest.json's "mel_statistics",
  // n_mels entries each), for normalising features. nullptr for a cache written before these
  // statistics existed: re-running `sluice prep` on it adds them. Immutable after open(); the
  // pointer lives as long as the reader.
  const MelStatistics* mel_statistics() const;

  Sample read(int64_t index);
  // The samples of `indices`, returned in the caller's order (duplicates allowed). Reads are
  // done sorted by (shard, row), and runs of adjacent rows of one shard are read with one
  // hyperslab read per dataset.
  std::vector<Sample> read_batch(const std::vector<int64_t>& indices);
  // The same, into `out` (resized to indices.size()), reusing the capacity of its samples'
  // vectors: a caller that reads batch after batch into one vector allocates (and page-faults)
  // nothing in the steady state, which is worth ~20% of read time for mel-sized samples.
  void read_batch(const std::vector<int64_t>& indices, std::vector<Sample>& out);

 private:
  struct State;
  explicit CacheReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace sluice::cache
