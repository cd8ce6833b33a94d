#pragma once
// Cache read patterns: how fast a data rank gets samples out of the HDF5 cache, compared with the
// fastest way to get the same bytes off the same files.
//
//   1. builds a synthetic cache shaped like LJSpeech (13,100 samples, ~100-900 frames of 80 mels,
//      ~20-180 tokens) in --dir (or a temporary directory, removed at the end); a --dir that
//      already holds a cache (manifest.json) is read as it is, so a real cache can be measured;
//   2. CacheReader::open time: median of --opens fresh opens (manifest + index only);
//   3. baseline: every shard file read sequentially with plain read() in 1 MiB blocks, after a
//      first pass has put them in the page cache (MB/s of file bytes);
//   4. batches of consecutive indices in cache order (adjacent rows coalesced into one read), two
//      passes: the first also maps the files' pages (a first epoch), the second is steady state;
//   5. random batches (--batch random indices) through CacheReader::read_batch, in MB/s of mel
//      payload, and the ratio to the baseline (goal >= 0.5).
//
// Command lines: bench/cache/bench_cache_read and `sluice bench cache`:
//   bench_cache_read [--dir DIR] [--samples N] [--shard-size N] [--n-mels N]
//          [--chunk-frames N] [--gzip L] [--float16] [--batch N] [--batches N] [--opens N]
//          [--chunk-cache-bytes N] [--seed N] [--keep]
#include <cstdint>
#include <string>

#include "cache/shard_writer.h"

namespace sluice::benchmark {

struct CacheReadOptions {
  std::string dir;  // an existing cache to read, or where to build the synthetic one ("" = a temporary directory)
  int64_t samples = 13100;
  int shard_size = 1000;
  int n_mels = 80;
  int chunk_frames = sluice::cache::ShardWriterOptions{}.chunk_frames;
  int gzip = 0;
  bool float16 = false;  // build the synthetic cache with float16 mels (cache.mel_dtype: float16)
  int batch = 32;
  int batches = 300;
  int opens = 20;
  int64_t chunk_cache_bytes = -1;
  uint32_t seed = 1;
  bool keep = false;
};

// Prints the measurements; 0 on success, 1 when the directory cannot be made.
int run_cache_read_bench(const CacheReadOptions& o);

}  // namespace sluice::benchmark
