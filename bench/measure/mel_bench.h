#pragma once
// Single-thread throughput of sluice's feature path (load_audio + MelExtractor) against the
// torchaudio pipeline a PyTorch TTS recipe runs, on the same files, in the same run.
//
// Command lines: bench/dataset/bench_mel and `sluice bench mel`:
//   bench_mel [--clips N] [--rate HZ] [--repeat K] [--python PATH] [--baseline SCRIPT]
//             [--no-baseline] [FILES_OR_DIRS...]
//
// Without files it writes N synthetic 16-bit WAV clips of 2-10 s (the LJSpeech range) at --rate
// to a temporary directory; --rate 44100 makes every clip go through the resampler. Features use
// the default MelConfig (22050 Hz, 1024/256, 80 slaney mels). Reports audio-seconds processed
// per wall-second: the pipeline (decode + resample + mel), mel alone on decoded audio, and the
// baseline's pipeline figure with the ratio. Numbers only: a benchmark asserts nothing.
#include <string>
#include <vector>

namespace sluice::benchmark {

// The torchaudio script in the source tree (bench/dataset/torchaudio_baseline.py).
std::string default_torchaudio_baseline();

struct MelBenchOptions {
  int clips = 100;
  int rate = 22050;
  int repeat = 3;
  std::string python = "/usr/bin/python3";  // has torchaudio on Debian
  std::string baseline = default_torchaudio_baseline();  // bench/dataset/torchaudio_baseline.py
  bool run_baseline = true;
  std::vector<std::string> inputs;
};

// Prints the rates and one JSON summary line; 0 on success, 1 when a file cannot be decoded,
// 2 when no audio file is found.
int run_mel_bench(const MelBenchOptions& options);

}  // namespace sluice::benchmark
