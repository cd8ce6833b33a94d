// MelExtractor against torchaudio (the features a PyTorch TTS recipe would compute), plus the
// config checks and the contracts the prep job relies on (frame counts, short clips, threads).
//
// The oracle comparison runs tests/dataset/mel_oracle.py under the system python (torchaudio
// from Debian) on the very samples sluice sees, exchanged as raw float32 files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dataset/audio.h"
#include "dataset/mel.h"

#ifndef SLUICE_SYSTEM_PYTHON
#error "SLUICE_SYSTEM_PYTHON must name the python with torchaudio (tests/CMakeLists.txt)"
#endif
#ifndef SLUICE_MEL_ORACLE
#error "SLUICE_MEL_ORACLE must name tests/dataset/mel_oracle.py"
#endif

namespace sluice::dataset {
namespace {

namespace fs = std::filesystem;

// |log a - log b| ~ |a - b| / a, so these bound the relative error of the mel energies.
//
// Two references. "torchaudio" is MelSpectrogram as a recipe runs it, in float32. "exact" is the
// same code with float64 as torch's default dtype: torchaudio's definition without rounding.
//
// A float32 FFT's rounding error is a fixed fraction (~1e-7) of the frame's loudest content, so
// a band far below it carries a large relative error: 40 dB down it is ~1e-5, 80 dB down ~1e-3.
// torchaudio's own float32 output is up to ~4e-4 away from exact in such bands, so no float32
// implementation can match it to 1e-4 everywhere. Hence two tiers:
// - "strong" elements, whose band's average bin magnitude is within 40 dB of the frame's
//   loudest bin (about 3/4 of a speech clip; the bands that shape a spectrogram): sluice must
//   match exact to 1e-4. Any real mistake (window, padding, frame offset, filter edges) shows up
//   here orders of magnitude larger.
// - every element, down to log_floor: within 1e-3 of both references.
constexpr double kStrongBandDecibels = 40.0;
constexpr double kStrongBandTolerance = 1e-4;
constexpr double kAnyBandTolerance = 1e-3;

// Filterbank weights, relative to each filter's peak: float32 storage of the exact weights, and
// torchaudio's float32 construction (band edges from a float32 linspace).
constexpr double kFilterbankExactTolerance = 1e-6;
constexpr double kFilterbankTorchaudioTolerance = 1e-4;

// Throws, so that gtest fails the test (or suite set-up) with the command in the message.
void run_or_throw(const std::string& command) {
  if (std::system(command.c_str()) != 0) throw std::runtime_error("command failed: " + command);
}

void write_raw(const fs::path& path, const std::vector<float>& samples) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(float)));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<float> read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> data(fs::file_size(path) / sizeof(float));
  in.read(reinterpret_cast<char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
  return data;
}

// A sweep across the whole band (every mel channel sees energy at some point, and it goes on
// above f_max, where loud content the filters ignore still sets the frame's FFT rounding), quiet
// noise (so no bin is exactly zero) and a stretch of digital silence (which must clamp to
// log_floor on both sides).
std::vector<float> chirp_with_noise(int sample_rate) {
  const double seconds = 3.0;
  const double f0 = 40.0;
  const double f1 = 0.45 * sample_rate;
  const auto n = static_cast<size_t>(seconds * sample_rate);
  std::vector<float> samples(n);
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> noise(-0.01f, 0.01f);
  const double k = std::log(f1 / f0) / seconds;
  const double two_pi = 2.0 * std::acos(-1.0);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / sample_rate;
    const double phase = two_pi * f0 * (std::exp(k * t) - 1.0) / k;  // exponential sweep
    samples[i] = static_cast<float>(0.5 * std::sin(phase)) + noise(random);
  }
  std::fill(samples.begin() + static_cast<std::ptrdiff_t>(n / 2),
            samples.begin() + static_cast<std::ptrdiff_t>(n / 2 + n / 10), 0.0f);
  return samples;
}

nlohmann::json config_json(const MelConfig& c) {
  return {{"sample_rate", c.sample_rate},
          {"n_fft", c.n_fft},
          {"win_length", c.win_length},
          {"hop_length", c.hop_length},
          {"f_min", c.f_min},
          {"f_max", c.f_max},
          {"n_mels", c.n_mels},
          {"power", c.power},
          {"mel_scale", c.mel_scale},
          {"norm", c.norm},
          {"center", c.center},
          {"pad_mode", c.pad_mode},
          {"log_floor", c.log_floor}};
}

void run_oracle(const fs::path& job_file, const nlohmann::json& jobs) {
  std::ofstream(job_file) << jobs.dump();
  run_or_throw(std::string(SLUICE_SYSTEM_PYTHON) + " " + SLUICE_MEL_ORACLE + " " +
               job_file.string());
}

struct OracleCase {
  std::string name;
  MelConfig config;
};

// gtest prints parameters of failed tests; without this it dumps the struct's bytes.
void PrintTo(const OracleCase& test_case, std::ostream* os) { *os << test_case.name; }

MelConfig config_with(const std::function<void(MelConfig&)>& change) {
  MelConfig config;
  change(config);
  return config;
}

std::vector<OracleCase> oracle_cases() {
  return {
      // The LJSpeech recipe: 22050 Hz, 1024/256, 80 slaney mels up to 8 kHz, magnitude.
      {"defaults", MelConfig{}},
      // A 16 kHz ASR-style front end: HTK scale, unnormalised filters, power spectrum, a window
      // shorter than n_fft (400 in 512) and a nonzero f_min.
      {"htk_power2_16k", config_with([](MelConfig& c) {
         c.sample_rate = 16000;
         c.n_fft = 512;
         c.win_length = 400;
         c.hop_length = 160;
         c.n_mels = 64;
         c.f_min = 20.0;
         c.f_max = 7600.0;
         c.mel_scale = "htk";
         c.norm = "none";
         c.power = 2.0;
       })},
      // A non-power-of-two FFT, zero padding, a fractional power and f_max at Nyquist.
      {"constant_pad_fft800", config_with([](MelConfig& c) {
         c.n_fft = 800;
         c.win_length = 600;
         c.hop_length = 200;
         c.n_mels = 100;
         c.f_min = 55.0;
         c.f_max = 11025.0;
         c.power = 1.5;
         c.pad_mode = "constant";
       })},
      // No centre padding: frames start at sample 0 and the tail shorter than n_fft is dropped.
      {"no_center_htk_slaney", config_with([](MelConfig& c) {
         c.center = false;
         c.mel_scale = "htk";
         c.n_mels = 128;
         c.log_floor = 1e-6;
       })},
  };
}

// Clips per sample rate, made once for the whole binary: espeak-ng speech at its native rate,
// converted with sox (the corpus path: a real recording decoded by load_audio), the synthetic
// sweep, and two edge lengths.
class MelMatchesTorchaudio : public ::testing::TestWithParam<OracleCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("sluice_test_mel_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const fs::path espeak = dir_ / "espeak.wav";
    run_or_throw("espeak-ng -w " + espeak.string() +
                 " 'The quick brown fox jumps over the lazy dog. Sphinx of black quartz, judge "
                 "my vow! How vexingly quick daft zebras jump.'");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static std::map<std::string, std::vector<float>> clips(const MelExtractor& extractor) {
    const int rate = extractor.config().sample_rate;
    const fs::path converted = dir_ / ("speech_" + std::to_string(rate) + ".wav");
    if (!fs::exists(converted)) {
      // -R: repeatable dither, so the clip (and the measured errors) are the same every run.
      run_or_throw("sox -R " + (dir_ / "espeak.wav").string() + " -r " + std::to_string(rate) +
                   " " + converted.string());
    }
    std::map<std::string, std::vector<float>> result;
    const std::vector<float> speech = load_audio(converted, rate);
    result["speech"] = speech;
    result["chirp_noise"] = chirp_with_noise(rate);
    // The shortest clip the extractor accepts: with reflect padding, the first and last frames
    // mirror almost the whole clip. Taken from the middle of the speech so it is not silent.
    const auto shortest = static_cast<std::ptrdiff_t>(extractor.min_samples());
    const auto middle = static_cast<std::ptrdiff_t>(speech.size() / 2);
    result["shortest"] =
        std::vector<float>(speech.begin() + middle, speech.begin() + middle + shortest);
    // A length that is no multiple of the hop, so the last frame is partial.
    result["odd_length"] =
        std::vector<float>(speech.begin() + middle, speech.begin() + middle + 12345);
    return result;
  }

  static fs::path dir_;
};

fs::path MelMatchesTorchaudio::dir_;

// Largest |a - b| over each filter's weights, relative to that filter's peak in b.
double filterbank_error(const std::vector<float>& a, const std::vector<float>& b, size_t n_mels) {
  double worst = 0.0;
  for (size_t m = 0; m < n_mels; ++m) {
    float peak = 0.0f;
    for (size_t i = m; i < b.size(); i += n_mels) peak = std::max(peak, b[i]);
    EXPECT_GT(peak, 0.0f) << "filter " << m << " is empty in torchaudio";
    for (size_t i = m; i < b.size(); i += n_mels) {
      worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / peak);
    }
  }
  return worst;
}

TEST_P(MelMatchesTorchaudio, FilterbankEqualsMelscaleFbanks) {
  const OracleCase& test_case = GetParam();
  const MelExtractor extractor(test_case.config);
  const fs::path output = dir_ / (test_case.name + "_filterbank.f32");
  run_oracle(dir_ / (test_case.name + "_filterbank.json"),
             nlohmann::json::array({{{"kind", "filterbank"},
                                     {"config", config_json(test_case.config)},
                                     {"output", output.string()}}}));
  const std::vector<float> torchaudio = read_raw(output);
  const std::vector<float> exact = read_raw(output.string() + "64");
  const std::vector<float> sluice = extractor.filterbank();
  ASSERT_EQ(sluice.size(), torchaudio.size());
  ASSERT_EQ(sluice.size(), exact.size());

  const auto n_mels = static_cast<size_t>(test_case.config.n_mels);
  const double to_exact = filterbank_error(sluice, exact, n_mels);
  const double to_torchaudio = filterbank_error(sluice, torchaudio, n_mels);
  std::cout << "[ filterbank ] " << test_case.name << ": max |sluice - ref| / filter peak: exact "
            << to_exact << ", torchaudio " << to_torchaudio << "\n";
  EXPECT_LE(to_exact, kFilterbankExactTolerance);
  EXPECT_LE(to_torchaudio, kFilterbankTorchaudioTolerance);
}

// Which elements are strong (see kStrongBandDecibels): a band's average bin value is its mel
// energy over the filter's total weight, compared with the frame's loudest bin raised to power.
std::vector<bool> strong_elements(const std::vector<float>& exact_log_mel,
                                  const std::vector<float>& exact_peak,
                                  const std::vector<float>& filterbank, const MelConfig& c) {
  const auto n_mels = static_cast<size_t>(c.n_mels);
  std::vector<double> log_filter_weight(n_mels, 0.0);
  for (size_t m = 0; m < n_mels; ++m) {
    double total = 0.0;
    for (size_t i = m; i < filterbank.size(); i += n_mels) total += filterbank[i];
    log_filter_weight[m] = std::log(total);
  }
  const double margin = kStrongBandDecibels / 20.0 * std::log(10.0);
  std::vector<bool> strong(exact_log_mel.size());
  for (size_t frame = 0; frame < exact_peak.size(); ++frame) {
    const double threshold = c.power * (std::log(double{exact_peak[frame]}) - margin);
    for (size_t m = 0; m < n_mels; ++m) {
      const size_t i = frame * n_mels + m;
      strong[i] = exact_log_mel[i] - log_filter_weight[m] >= threshold;
    }
  }
  return strong;
}

struct LogMelErrors {
  double any = 0.0;     // over every element
  double strong = 0.0;  // over the strong ones
};

// The criterion, "relative error at most 1e-4", read as the norm-wise relative error
// ||a - b||_2 / ||b||_2 over the whole log-mel matrix of a clip (the usual definition for arrays).
constexpr double kRelativeTolerance = 1e-4;

double relative_error(const std::vector<float>& actual, const std::vector<float>& reference) {
  double difference = 0.0, norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = double{actual[i]} - double{reference[i]};
    difference += d * d;
    norm += double{reference[i]} * reference[i];
  }
  return std::sqrt(difference / norm);
}

LogMelErrors log_mel_errors(const std::vector<float>& actual, const std::vector<float>& reference,
                            const std::vector<bool>& strong) {
  LogMelErrors errors;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(double{actual[i]} - reference[i]);
    errors.any = std::max(errors.any, error);
    if (strong[i]) errors.strong = std::max(errors.strong, error);
  }
  return errors;
}

TEST_P(MelMatchesTorchaudio, LogMelWithinTolerance) {
  const OracleCase& test_case = GetParam();
  const MelExtractor extractor(test_case.config);
  const MelConfig& c = test_case.config;
  const auto inputs = clips(extractor);

  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [clip, samples] : inputs) {
    const fs::path input = dir_ / (test_case.name + "_" + clip + ".f32");
    write_raw(input, samples);
    jobs.push_back({{"kind", "log_mel"},
                    {"config", config_json(c)},
                    {"input", input.string()},
                    {"output", input.string() + ".mel"}});
  }
  run_oracle(dir_ / (test_case.name + "_jobs.json"), jobs);

  const auto n_mels = static_cast<size_t>(c.n_mels);
  std::vector<float> features;
  for (const auto& [clip, samples] : inputs) {
    SCOPED_TRACE(test_case.name + " / " + clip);
    const std::string reference = (dir_ / (test_case.name + "_" + clip + ".f32.mel")).string();
    const std::vector<float> torchaudio = read_raw(reference);
    const std::vector<float> exact = read_raw(reference + "64");
    const std::vector<float> exact_peak = read_raw(reference + "64.peak");
    const auto n = static_cast<int64_t>(samples.size());
    ASSERT_EQ(torchaudio.size() % n_mels, 0u);
    ASSERT_EQ(exact.size(), torchaudio.size());
    const auto oracle_frames = static_cast<int64_t>(torchaudio.size() / n_mels);
    ASSERT_EQ(static_cast<int64_t>(exact_peak.size()), oracle_frames);
    EXPECT_EQ(extractor.n_frames(n), oracle_frames);

    extractor.compute(samples.data(), n, features);
    ASSERT_EQ(features.size(), torchaudio.size());
    // sluice's filterbank equals the exact one (FilterbankEqualsMelscaleFbanks).
    const std::vector<bool> strong = strong_elements(exact, exact_peak, extractor.filterbank(), c);
    const auto strong_percent =
        100 * std::count(strong.begin(), strong.end(), true) / static_cast<int64_t>(strong.size());
    const LogMelErrors to_torchaudio = log_mel_errors(features, torchaudio, strong);
    const LogMelErrors to_exact = log_mel_errors(features, exact, strong);
    const LogMelErrors torchaudio_own = log_mel_errors(torchaudio, exact, strong);
    const double relative = relative_error(features, torchaudio);
    // Printed so that the measured accuracy is in the test log, not just "passed".
    std::cout << "[ mel error ] " << std::left << std::setw(22) << test_case.name << std::setw(12)
              << clip << std::right << std::setw(4) << oracle_frames << " frames, " << std::setw(2)
              << strong_percent << "% strong. max |a - b| all / strong: "
              << "sluice-torchaudio " << to_torchaudio.any << " / " << to_torchaudio.strong
              << ", sluice-exact " << to_exact.any << " / " << to_exact.strong
              << ", torchaudio-exact " << torchaudio_own.any << " / " << torchaudio_own.strong
              << "; relative to torchaudio " << relative << "\n";
    EXPECT_LE(relative, kRelativeTolerance);
    EXPECT_LE(to_exact.strong, kStrongBandTolerance);
    EXPECT_LE(to_exact.any, kAnyBandTolerance);
    EXPECT_LE(to_torchaudio.any, kAnyBandTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Torchaudio, MelMatchesTorchaudio, ::testing::ValuesIn(oracle_cases()),
                         [](const ::testing::TestParamInfo<OracleCase>& param) {
                           return param.param.name;
                         });

TEST(MelConfig, DefaultsAreValid) { EXPECT_NO_THROW(MelConfig{}.validate()); }

// Each message must name the key the user has to change, with the offending value.
TEST(MelConfig, RejectsBadSettingsNamingTheKey) {
  struct Bad {
    std::function<void(MelConfig&)> change;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {[](MelConfig& c) {
         c.sample_rate = 16000;
         c.f_max = 9000;
       },
       "features.f_max (9000) exceeds sample_rate/2 (8000)"},
      {[](MelConfig& c) { c.win_length = 2048; }, "features.win_length (2048)"},
      {[](MelConfig& c) { c.hop_length = 0; }, "features.hop_length (0)"},
      {[](MelConfig& c) { c.n_mels = 0; }, "features.n_mels (0)"},
      {[](MelConfig& c) { c.f_min = 8000; }, "features.f_min (8000) must be below features.f_max"},
      {[](MelConfig& c) { c.power = 0; }, "features.power (0)"},
      {[](MelConfig& c) { c.mel_scale = "mel"; }, "features.mel_scale (mel)"},
      {[](MelConfig& c) { c.norm = "l2"; }, "features.norm (l2)"},
      {[](MelConfig& c) { c.pad_mode = "replicate"; }, "features.pad_mode (replicate)"},
      {[](MelConfig& c) { c.log_floor = 0; }, "features.log_floor (0)"},
  };
  for (const Bad& bad : cases) {
    MelConfig config;
    bad.change(config);
    try {
      config.validate();
      ADD_FAILURE() << "accepted a config that should fail with: " << bad.message;
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(bad.message), std::string::npos) << error.what();
    }
    EXPECT_THROW(MelExtractor{config}, ConfigError) << bad.message;
  }
}

// torch.stft's counts: with centre padding 1 + n / hop; without, 1 + (n - n_fft) / hop.
TEST(MelExtractor, FrameCountsFollowTorchStft) {
  const MelExtractor centred{MelConfig{}};
  EXPECT_EQ(centred.min_samples(), 513);
  EXPECT_EQ(centred.n_frames(22050), 87);
  EXPECT_EQ(centred.n_frames(256), 0);  // below min_samples: reflect padding impossible
  EXPECT_EQ(centred.n_frames(513), 3);

  const MelExtractor uncentred{config_with([](MelConfig& c) { c.center = false; })};
  EXPECT_EQ(uncentred.min_samples(), 1024);
  EXPECT_EQ(uncentred.n_frames(1023), 0);
  EXPECT_EQ(uncentred.n_frames(1024), 1);
  EXPECT_EQ(uncentred.n_frames(1024 + 255), 1);
  EXPECT_EQ(uncentred.n_frames(1024 + 256), 2);

  const MelExtractor zero_padded{config_with([](MelConfig& c) { c.pad_mode = "constant"; })};
  EXPECT_EQ(zero_padded.min_samples(), 1);
  EXPECT_EQ(zero_padded.n_frames(1), 1);
}

TEST(MelExtractor, RejectsClipsBelowMinSamples) {
  const MelExtractor extractor{MelConfig{}};
  std::vector<float> audio(512, 0.1f);
  std::vector<float> out;
  EXPECT_THROW(extractor.compute(audio.data(), 512, out), DataError);
}

TEST(MelExtractor, SilenceIsTheLogFloor) {
  const MelExtractor extractor{MelConfig{}};
  std::vector<float> silence(4000, 0.0f);
  std::vector<float> out;
  extractor.compute(silence.data(), 4000, out);
  ASSERT_EQ(out.size(), static_cast<size_t>(extractor.n_frames(4000) * 80));
  for (float value : out) ASSERT_EQ(value, std::log(1e-5f));
}

// A 1 kHz tone must peak in the filter centred nearest 1 kHz. Slaney mels are linear below 1 kHz
// at 200/3 Hz per mel, so 1 kHz is mel 15; the 82 filter edges split [0, mel(8 kHz) = 45.25]
// into 81 steps of 0.5586 mel, so filter 26 is centred at 27 * 0.5586 = 15.08 mel (1005 Hz).
TEST(MelExtractor, ToneLandsInItsMelChannel) {
  const MelExtractor extractor{MelConfig{}};
  std::vector<float> tone(22050);
  for (size_t i = 0; i < tone.size(); ++i) {
    tone[i] = 0.5f * static_cast<float>(std::sin(2.0 * std::acos(-1.0) * 1000.0 * i / 22050.0));
  }
  std::vector<float> out;
  extractor.compute(tone.data(), static_cast<int64_t>(tone.size()), out);
  const int64_t frame = extractor.n_frames(22050) / 2;
  const float* row = out.data() + frame * 80;
  EXPECT_EQ(std::max_element(row, row + 80) - row, 26);
}

// The prep job may share one extractor between worker threads: results must be the same as
// computing alone, bit for bit.
TEST(MelExtractor, ThreadsSharingOneExtractorGetTheSameFeatures) {
  const MelExtractor extractor{MelConfig{}};
  std::vector<std::vector<float>> clips;
  for (int t = 0; t < 4; ++t) {
    std::vector<float> clip = chirp_with_noise(22050);
    std::rotate(clip.begin(), clip.begin() + 5000 * t, clip.end());
    clips.push_back(std::move(clip));
  }
  std::vector<std::vector<float>> alone(clips.size());
  for (size_t t = 0; t < clips.size(); ++t) {
    extractor.compute(clips[t].data(), static_cast<int64_t>(clips[t].size()), alone[t]);
  }
  std::vector<std::vector<float>> together(clips.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < clips.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 5; ++repeat) {
        extractor.compute(clips[t].data(), static_cast<int64_t>(clips[t].size()), together[t]);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < clips.size(); ++t) EXPECT_EQ(together[t], alone[t]) << "clip " << t;
}

}  // namespace
}  // namespace sluice::dataset
