// bench_mel: single-thread throughput of sluice's feature path against torchaudio on the same
// files, in the same run. The measuring core is bench/measure/mel_bench.h (also `sluice bench mel`);
// this is its command line.
//
//   bench_mel [--clips N] [--rate HZ] [--repeat K] [--python PATH] [--baseline SCRIPT]
//             [--no-baseline] [FILES_OR_DIRS...]
#include <cstdlib>
#include <iostream>
#include <string>

#include "bench/measure/mel_bench.h"

namespace {

using Options = sluice::benchmark::MelBenchOptions;

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "bench_mel: " << problem << "\n"
            << "usage: bench_mel [--clips N] [--rate HZ] [--repeat K] [--python PATH]\n"
            << "                 [--baseline SCRIPT] [--no-baseline] [FILES_OR_DIRS...]\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--clips") {
      options.clips = std::stoi(value());
    } else if (arg == "--rate") {
      options.rate = std::stoi(value());
    } else if (arg == "--repeat") {
      options.repeat = std::stoi(value());
    } else if (arg == "--python") {
      options.python = value();
    } else if (arg == "--baseline") {
      options.baseline = value();
    } else if (arg == "--no-baseline") {
      options.run_baseline = false;
    } else if (arg.rfind("--", 0) == 0) {
      usage("unknown option " + arg);
    } else {
      options.inputs.push_back(arg);
    }
  }
  if (options.clips < 1 || options.repeat < 1 || options.rate < 1) usage("values must be positive");
  return options;
}

}  // namespace

int main(int argc, char** argv) { return sluice::benchmark::run_mel_bench(parse(argc, argv)); }
