#include "bench/measure/cache_read_bench.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "cache/cache_reader.h"
#include "cache/shard_reader.h"
#include "cache/shard_writer.h"
#include "common/clock.h"

namespace sluice::benchmark {

namespace fs = std::filesystem;
using sluice::cache::CacheReader;
using Options = CacheReadOptions;

namespace {



double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

// LJSpeech-like lengths: 1-10 s of audio at 22050 Hz / hop 256 -> ~100-900 frames (mean ~570),
// ~20-180 tokens roughly proportional to the duration.
void build_cache(const Options& o, const fs::path& dir) {
  std::mt19937 random(o.seed);
  std::normal_distribution<double> frames_dist(570, 190);
  std::normal_distribution<double> token_noise(0, 12);
  std::uniform_int_distribution<int32_t> token_id(0, 150);
  std::vector<float> mel;
  std::vector<int32_t> tokens;
  std::vector<fs::path> files;
  const auto start = Clock::now();
  int64_t bytes = 0;
  uint32_t state = o.seed * 2654435761u + 1;
  for (int64_t first = 0, shard = 0; first < o.samples; first += o.shard_size, ++shard) {
    files.push_back(dir / sluice::cache::shard_file_name(shard));
    sluice::cache::ShardWriter writer(files.back(), static_cast<int>(shard), o.n_mels, "bench-fp",
                                      sluice::cache::ShardWriterOptions{o.chunk_frames, o.gzip, o.float16});
    for (int64_t i = first; i < std::min<int64_t>(first + o.shard_size, o.samples); ++i) {
      const int64_t frames = std::clamp<int64_t>(std::llround(frames_dist(random)), 100, 900);
      const int64_t n_tokens = std::clamp<int64_t>(
          std::llround(20 + (frames - 100) * 160.0 / 800.0 + token_noise(random)), 20, 180);
      mel.resize(static_cast<size_t>(frames * o.n_mels));
      for (float& v : mel) {  // cheap xorshift: log-mel-like values in [-11.5, 0.5)
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        v = -11.5f + static_cast<float>(state >> 8) * (12.0f / 16777216.0f);
      }
      tokens.resize(static_cast<size_t>(n_tokens));
      for (int32_t& t : tokens) t = token_id(random);
      sluice::cache::ShardSample s;
      char id[32];
      std::snprintf(id, sizeof(id), "LJ%03lld-%04lld", static_cast<long long>(i / 1000 + 1),
                    static_cast<long long>(i % 1000));
      s.id = id;
      s.text = "synthetic sample " + s.id;
      s.language = "en";
      s.speaker = "ljspeech";
      s.mel = mel.data();
      s.n_frames = frames;
      s.tokens = tokens.data();
      s.n_tokens = n_tokens;
      s.seconds = static_cast<double>(frames) * 256.0 / 22050.0;
      writer.append(s);
      bytes += frames * o.n_mels * (o.float16 ? 2 : 4);
    }
    writer.commit();
  }
  nlohmann::json settings{{"n_mels", o.n_mels}, {"chunk_frames", o.chunk_frames}, {"gzip", o.gzip}};
  if (o.float16) settings["cache"] = {{"mel_dtype", "float16"}};
  sluice::cache::finalize_cache(dir, files, settings, {{"size", 151}});
  const double elapsed = seconds_since(start);
  std::printf(
      "built cache: %lld samples in %zu shards, %.1f MB of mels, %.1f s (%.0f MB/s written)\n",
      static_cast<long long>(o.samples), files.size(), bytes / 1e6, elapsed, bytes / 1e6 / elapsed);
}

// Reads every shard file once with read() in 1 MiB blocks; returns bytes read.
int64_t read_files_sequentially(const std::vector<fs::path>& files) {
  std::vector<char> buffer(1 << 20);
  int64_t total = 0;
  for (const fs::path& file : files) {
    int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) {
      std::perror(file.c_str());
      std::exit(1);
    }
    ssize_t n = 0;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) total += n;
    ::close(fd);
  }
  return total;
}

int64_t mel_bytes(const std::vector<sluice::cache::Sample>& batch) {
  int64_t bytes = 0;
  for (const auto& s : batch) bytes += static_cast<int64_t>(s.mel.size() * sizeof(float));
  return bytes;
}

// 1. Open time.
void measure_open(const fs::path& dir, const CacheReadOptions& o) {
  std::vector<double> open_ms;
  int64_t size = 0;
  for (int i = 0; i < o.opens + 1; ++i) {
    const auto start = Clock::now();
    CacheReader reader = CacheReader::open(dir, o.chunk_cache_bytes);
    const double ms = seconds_since(start) * 1e3;
    size = reader.size();
    if (i > 0) open_ms.push_back(ms);  // the first open also initialises HDF5
  }
  std::printf(
      "open: %lld samples; median %.2f ms, min %.2f, max %.2f over %d opens (goal <= 20 ms)\n",
      static_cast<long long>(size), median(open_ms),
      *std::min_element(open_ms.begin(), open_ms.end()),
      *std::max_element(open_ms.begin(), open_ms.end()), o.opens);
}

// 2. baseline: the same files, sequential read() from the page cache.
// Returns its MB/s.
double measure_baseline(const fs::path& dir) {
  const std::vector<fs::path> files = sluice::cache::list_shard_files(dir);
  read_files_sequentially(files);  // warm the page cache
  std::vector<double> baseline_rates;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = Clock::now();
    const int64_t bytes = read_files_sequentially(files);
    baseline_rates.push_back(bytes / 1e6 / seconds_since(start));
  }
  const double baseline = median(baseline_rates);
  std::printf(
      "baseline: sequential read() of %zu shard files from the page cache: %.0f MB/s "
      "(median of 3 passes)\n",
      files.size(), baseline);
  return baseline;
}

// 3. batches of consecutive indices in cache order, one pass over the cache; twice: the first
// pass also maps the shard files' pages into this process (as a first epoch would).
void measure_sequential(CacheReader& reader, const CacheReadOptions& o, double baseline) {
  std::vector<sluice::cache::Sample> batch;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t sequential_bytes = 0;
    const auto sequential_start = Clock::now();
    for (int64_t first = 0; first < reader.size(); first += o.batch) {
      std::vector<int64_t> indices;
      for (int64_t i = first; i < std::min<int64_t>(first + o.batch, reader.size()); ++i) {
        indices.push_back(i);
      }
      reader.read_batch(indices, batch);
      sequential_bytes += mel_bytes(batch);
    }
    const double sequential_rate = sequential_bytes / 1e6 / seconds_since(sequential_start);
    std::printf(
        "sequential batches of %d in cache order, %s pass: %.0f MB/s of mel payload "
        "(ratio %.2f)\n",
        o.batch, pass == 0 ? "first" : "second", sequential_rate, sequential_rate / baseline);
  }
}

// 4. random batches, into one reused batch (the steady state of a data rank), then returning
// fresh vectors every batch (allocation and page faults included).
void measure_random(CacheReader& reader, const CacheReadOptions& o, double baseline) {
  std::mt19937_64 random(o.seed);
  std::uniform_int_distribution<int64_t> pick(0, reader.size() - 1);
  auto random_batch = [&] {
    std::vector<int64_t> indices(static_cast<size_t>(o.batch));
    for (int64_t& index : indices) index = pick(random);
    return indices;
  };
  std::vector<sluice::cache::Sample> batch;
  std::vector<double> batch_ms;
  int64_t random_bytes = 0;
  const auto random_start = Clock::now();
  for (int b = 0; b < o.batches; ++b) {
    const std::vector<int64_t> indices = random_batch();
    const auto start = Clock::now();
    reader.read_batch(indices, batch);
    batch_ms.push_back(seconds_since(start) * 1e3);
    random_bytes += mel_bytes(batch);
  }
  const double random_seconds = seconds_since(random_start);
  const double random_rate = random_bytes / 1e6 / random_seconds;
  std::printf(
      "random batches of %d: %.0f MB/s of mel payload, %.0f samples/s; per batch p50 "
      "%.2f ms, p95 %.2f ms\n",
      o.batch, random_rate, o.batches * o.batch / random_seconds, percentile(batch_ms, 0.5),
      percentile(batch_ms, 0.95));
  std::printf("ratio random / baseline: %.2f (goal >= 0.5)\n", random_rate / baseline);
  int64_t fresh_bytes = 0;
  const auto fresh_start = Clock::now();
  for (int b = 0; b < o.batches; ++b) fresh_bytes += mel_bytes(reader.read_batch(random_batch()));
  const double fresh_rate = fresh_bytes / 1e6 / seconds_since(fresh_start);
  std::printf("random batches of %d, new vectors per batch: %.0f MB/s (ratio %.2f)\n", o.batch,
              fresh_rate, fresh_rate / baseline);
}

}  // namespace

int run_cache_read_bench(const CacheReadOptions& o) {
  fs::path dir = o.dir;
  bool temporary = false;
  if (dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "sluice-bench-cache-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = pattern;
    temporary = !o.keep;
  }
  fs::create_directories(dir);
  std::printf("bench_cache_read: dir %s, chunk_frames %d, gzip %d, mels %s, batch %d, chunk cache %s\n",
              dir.c_str(), o.chunk_frames, o.gzip, o.float16 ? "float16" : "float32", o.batch,
              o.chunk_cache_bytes < 0 ? "HDF5 default (1 MiB)"
                                      : (std::to_string(o.chunk_cache_bytes) + " B").c_str());
  if (fs::exists(dir / "manifest.json")) {
    std::printf("reusing the cache already in %s\n", dir.c_str());
  } else {
    build_cache(o, dir);
  }

  measure_open(dir, o);
  const double baseline = measure_baseline(dir);
  CacheReader reader = CacheReader::open(dir, o.chunk_cache_bytes);
  measure_sequential(reader, o, baseline);
  measure_random(reader, o, baseline);
  if (temporary) fs::remove_all(dir);
  return 0;
}

}  // namespace sluice::benchmark
