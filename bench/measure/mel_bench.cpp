#include "bench/measure/mel_bench.h"

#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "dataset/audio.h"
#include "dataset/mel.h"

namespace sluice::benchmark {

std::string default_torchaudio_baseline() { return SLUICE_TORCHAUDIO_BASELINE; }

namespace {

namespace fs = std::filesystem;
using sluice::dataset::MelConfig;
using sluice::dataset::MelExtractor;
using Options = MelBenchOptions;

// Voiced-speech-like content: a wandering pitch with harmonics plus breath noise. The content
// does not change the cost of decoding or of an FFT; it only keeps the clips honest audio.
void write_clip(const fs::path& path, int rate, double seconds, std::mt19937& random) {
  const auto frames = static_cast<size_t>(seconds * rate);
  std::vector<short> samples(frames);
  std::normal_distribution<double> noise(0.0, 0.01);
  const double two_pi = 2.0 * std::acos(-1.0);
  const double base_hz = std::uniform_real_distribution<double>(90.0, 220.0)(random);
  double phase = 0.0;
  for (size_t i = 0; i < frames; ++i) {
    const double t = static_cast<double>(i) / rate;
    phase += two_pi * base_hz * (1.0 + 0.1 * std::sin(two_pi * 3.0 * t)) / rate;
    double x = noise(random);
    for (int h = 1; h <= 12; ++h) x += 0.3 / h * std::sin(h * phase);
    samples[i] = static_cast<short>(std::clamp(x, -1.0, 1.0) * 32767.0);
  }
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  if (file == nullptr) {
    std::cerr << "bench_mel: cannot write " << path << ": " << sf_strerror(nullptr) << "\n";
    std::exit(1);
  }
  sf_write_short(file, samples.data(), static_cast<sf_count_t>(samples.size()));
  sf_close(file);
}

std::vector<fs::path> audio_files(const std::vector<std::string>& inputs) {
  std::vector<fs::path> files;
  for (const std::string& input : inputs) {
    if (!fs::is_directory(input)) {
      files.emplace_back(input);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(input)) {
      std::string ext = entry.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (ext == ".wav" || ext == ".flac" || ext == ".ogg" || ext == ".opus" || ext == ".mp3") {
        found.push_back(entry.path());
      }
    }
    std::sort(found.begin(), found.end());  // same order as the baseline script
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}


std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs the baseline script on the same inputs (it expands directories the same way) and
// returns its JSON line, or null when it failed.
nlohmann::json run_baseline(const Options& options, const std::vector<std::string>& inputs) {
  std::string command = shell_quote(options.python) + " " + shell_quote(options.baseline) +
                        " --threads 1 --repeat " + std::to_string(options.repeat);
  for (const std::string& input : inputs) command += " " + shell_quote(input);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return nullptr;
  std::string output;
  char buffer[4096];
  while (fgets(buffer, sizeof buffer, pipe.get()) != nullptr) output += buffer;
  const auto last_line_start = output.find_last_of('{');
  if (last_line_start == std::string::npos) return nullptr;
  return nlohmann::json::parse(output.substr(last_line_start), nullptr, /*allow_exceptions=*/false);
}

// Synthetic clips of 2-10 s at options.rate in a fresh temporary folder (removed by the caller).
fs::path generate_clips(const MelBenchOptions& options) {
  const fs::path generated = fs::temp_directory_path() / ("sluice_bench_mel_" + std::to_string(::getpid()));
  fs::create_directories(generated);
  std::mt19937 random(42);
  std::uniform_real_distribution<double> duration(2.0, 10.0);
  for (int i = 0; i < options.clips; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "clip_%04d.wav", i);
    write_clip(generated / name, options.rate, duration(random), random);
  }
  return generated;
}

// Untimed pass: pulls the files into the page cache (the baseline then finds them there too)
// and keeps the decoded audio for the mel-only measurement. False (said on stderr) when a file
// does not decode.
bool decode_all(const std::vector<fs::path>& files, const MelConfig& config, std::vector<std::vector<float>>& decoded,
                double& audio_seconds) {
  decoded.reserve(files.size());
  audio_seconds = 0.0;
  for (const fs::path& file : files) {
    try {
      decoded.push_back(sluice::dataset::load_audio(file, config.sample_rate));
    } catch (const sluice::dataset::SampleRejected& rejected) {
      // Both sides must see the same files: drop the bad one from the inputs and rerun.
      std::cerr << "bench_mel: " << rejected.what() << "\n";
      return false;
    }
    audio_seconds += static_cast<double>(decoded.back().size()) / config.sample_rate;
  }
  return true;
}

// Wall seconds of `repeat` passes of decode + resample + mel over `files`.
double time_pipeline(const std::vector<fs::path>& files, const MelConfig& config, const MelExtractor& extractor,
                     int repeat) {
  std::vector<float> features;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeat; ++r) {
    for (const fs::path& file : files) {
      const std::vector<float> audio = sluice::dataset::load_audio(file, config.sample_rate);
      extractor.compute(audio.data(), static_cast<int64_t>(audio.size()), features);
    }
  }
  return seconds_since(start);
}

struct MelOnlyTime {
  double wall = 0;
  double cpu = 0;  // this thread's CPU time: on a loaded machine, less of the wait for a core
};

// Wall and CPU seconds of `repeat` passes of mel alone over the decoded audio.
MelOnlyTime time_mel_only(const std::vector<std::vector<float>>& decoded, const MelExtractor& extractor,
                          int repeat) {
  std::vector<float> features;
  const double cpu_start = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeat; ++r) {
    for (const std::vector<float>& audio : decoded) {
      extractor.compute(audio.data(), static_cast<int64_t>(audio.size()), features);
    }
  }
  return {seconds_since(start), thread_cpu_seconds() - cpu_start};
}

// Wall and CPU seconds of `repeat` passes of decode alone over `files`: load_audio as prep calls it
// (read from the page cache, decode, resample to the mel's rate when the file's differs, into one
// buffer reused from clip to clip, as a prep worker's), no mel. With time_mel_only on the same
// files: the two halves of prep's per-clip work, each alone.
MelOnlyTime time_decode_only(const std::vector<fs::path>& files, const MelConfig& config, int repeat) {
  const double cpu_start = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  size_t samples = 0;
  std::vector<float> audio;
  for (int r = 0; r < repeat; ++r) {
    for (const fs::path& file : files) {
      sluice::dataset::load_audio(file, config.sample_rate, audio);
      samples += audio.size();
    }
  }
  if (samples == 0) std::cerr << "bench mel: the files decoded to no samples\n";
  return {seconds_since(start), thread_cpu_seconds() - cpu_start};
}

// torchaudio on the same files in the same run: its rate and the ratio, printed and added to
// `summary`.
void compare_with_torchaudio(const MelBenchOptions& options, const fs::path& generated, double sluice_rate,
                             nlohmann::json& summary) {
  const nlohmann::json baseline = run_baseline(
      options, generated.empty() ? options.inputs : std::vector<std::string>{generated.string()});
  if (baseline.is_object() && baseline.contains("audio_s_per_s")) {
    const double torch_rate = baseline["audio_s_per_s"].get<double>();
    std::printf("torchaudio load + mel      : %9.0f audio-s/s (torch.set_num_threads(1))\n",
                torch_rate);
    std::printf("ratio sluice / torchaudio  : %9.2f\n", sluice_rate / torch_rate);
    summary["torchaudio_audio_s_per_s"] = torch_rate;
    summary["ratio"] = sluice_rate / torch_rate;
  } else {
    std::printf("torchaudio baseline failed (%s %s): no ratio\n", options.python.c_str(),
                options.baseline.c_str());
  }
}

}  // namespace

int run_mel_bench(const MelBenchOptions& options) {
  if (options.clips < 1 || options.repeat < 1 || options.rate < 1) {
    std::cerr << "bench mel: --clips, --repeat and --rate must be positive\n";
    return 2;
  }
  const MelConfig config;
  const MelExtractor extractor(config);

  fs::path generated;
  std::vector<fs::path> files;
  if (options.inputs.empty()) {
    generated = generate_clips(options);
    files = audio_files({generated.string()});
  } else {
    files = audio_files(options.inputs);
  }
  if (files.empty()) {
    std::cerr << "bench mel: no audio files (.wav, .flac, .ogg, .opus, .mp3) found in the inputs\n";
    return 2;
  }
  std::vector<std::vector<float>> decoded;
  double audio_seconds_per_pass = 0.0;
  if (!decode_all(files, config, decoded, audio_seconds_per_pass)) return 1;
  const double pipeline_wall = time_pipeline(files, config, extractor, options.repeat);
  const MelOnlyTime mel_time = time_mel_only(decoded, extractor, options.repeat);
  const MelOnlyTime decode_time = time_decode_only(files, config, options.repeat);
  const double mel_wall = mel_time.wall;

  const double audio_seconds = audio_seconds_per_pass * options.repeat;
  const double sluice_rate = audio_seconds / pipeline_wall;
  const double mel_rate = audio_seconds / mel_wall;
  std::printf("files: %zu x %d passes, %.1f audio-s per pass, source rate %s\n", files.size(),
              options.repeat, audio_seconds_per_pass,
              options.inputs.empty() ? std::to_string(options.rate).c_str() : "as found");
  std::printf("sluice    load_audio + mel : %9.0f audio-s/s (one thread)\n", sluice_rate);
  std::printf("sluice    mel only         : %9.0f audio-s/s (one thread)\n", mel_rate);
  std::printf("sluice    load_audio only  : %9.0f audio-s/s (one thread)\n", audio_seconds / decode_time.wall);

  nlohmann::json summary = {{"files", files.size()},
                            {"repeat", options.repeat},
                            {"audio_seconds", audio_seconds},
                            {"sluice_audio_s_per_s", sluice_rate},
                            {"sluice_mel_only_audio_s_per_s", mel_rate},
                            {"sluice_mel_only_audio_s_per_cpu_s", audio_seconds / mel_time.cpu},
                            {"sluice_decode_only_audio_s_per_s", audio_seconds / decode_time.wall},
                            {"sluice_decode_only_audio_s_per_cpu_s", audio_seconds / decode_time.cpu}};
  if (options.run_baseline) compare_with_torchaudio(options, generated, sluice_rate, summary);
  std::printf("%s\n", summary.dump().c_str());

  if (!generated.empty()) {
    std::error_code ec;
    fs::remove_all(generated, ec);
  }
  return 0;
}

}  // namespace sluice::benchmark
