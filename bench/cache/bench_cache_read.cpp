// bench_cache_read: how fast a data rank gets samples out of the HDF5 cache, compared with plain
// sequential read() of the same shard files, measured in the same run (what each step measures:
// bench/measure/cache_read_bench.h, whose core this is also `sluice bench cache`).
//
// Usage: bench_cache_read [--dir DIR] [--samples N] [--shard-size N] [--n-mels N]
//          [--chunk-frames N] [--gzip L] [--float16] [--batch N] [--batches N] [--opens N]
//          [--chunk-cache-bytes N] [--seed N] [--keep]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/measure/cache_read_bench.h"

namespace {

using Options = sluice::benchmark::CacheReadOptions;

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir")
      o.dir = next();
    else if (a == "--samples")
      o.samples = std::stoll(next());
    else if (a == "--shard-size")
      o.shard_size = std::stoi(next());
    else if (a == "--n-mels")
      o.n_mels = std::stoi(next());
    else if (a == "--chunk-frames")
      o.chunk_frames = std::stoi(next());
    else if (a == "--gzip")
      o.gzip = std::stoi(next());
    else if (a == "--batch")
      o.batch = std::stoi(next());
    else if (a == "--batches")
      o.batches = std::stoi(next());
    else if (a == "--opens")
      o.opens = std::stoi(next());
    else if (a == "--chunk-cache-bytes")
      o.chunk_cache_bytes = std::stoll(next());
    else if (a == "--seed")
      o.seed = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--keep")
      o.keep = true;
    else if (a == "--float16")
      o.float16 = true;
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of the source)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) { return sluice::benchmark::run_cache_read_bench(parse(argc, argv)); }
