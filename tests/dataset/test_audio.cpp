// probe_audio / load_audio on files written here with libsndfile: every sample format the corpus
// may hold, downmixing, resampling, and each reason a file is rejected.
#include <gtest/gtest.h>
#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "dataset/audio.h"

namespace sluice::dataset {
namespace {

namespace fs = std::filesystem;

const double kTwoPi = 2.0 * std::acos(-1.0);

class AudioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("sluice_test_audio_" + std::to_string(::getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path dir_;
};

// Writes interleaved samples through libsndfile; T selects sf_write_short/int/float.
template <typename T>
void write_audio(const fs::path& path, int format, int sample_rate, int channels,
                 const std::vector<T>& interleaved) {
  SF_INFO info{};
  info.samplerate = sample_rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << path << ": " << sf_strerror(nullptr);
  const auto count = static_cast<sf_count_t>(interleaved.size());
  sf_count_t written = 0;
  if constexpr (std::is_same_v<T, int16_t>) {
    written = sf_write_short(file, interleaved.data(), count);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    written = sf_write_int(file, interleaved.data(), count);
  } else {
    written = sf_write_float(file, interleaved.data(), count);
  }
  EXPECT_EQ(written, count);
  sf_close(file);
}

// What libsndfile itself decodes, for checking that load_audio passes it through untouched.
std::vector<float> libsndfile_decode(const fs::path& path) {
  SF_INFO info{};
  SNDFILE* file = sf_open(path.c_str(), SFM_READ, &info);
  EXPECT_NE(file, nullptr) << sf_strerror(nullptr);
  if (file == nullptr) return {};
  std::vector<float> samples(static_cast<size_t>(info.frames * info.channels));
  sf_readf_float(file, samples.data(), info.frames);
  sf_close(file);
  return samples;
}

std::vector<float> sine(double hz, int sample_rate, size_t n, double amplitude) {
  std::vector<float> samples(n);
  for (size_t i = 0; i < n; ++i) {
    samples[i] = static_cast<float>(amplitude * std::sin(kTwoPi * hz * i / sample_rate));
  }
  return samples;
}

// Counting rising zero crossings gives the frequency of a clean tone to within one cycle.
double rising_zero_crossings_per_second(const std::vector<float>& samples, int sample_rate) {
  int crossings = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i - 1] < 0.0f && samples[i] >= 0.0f) ++crossings;
  }
  return crossings * static_cast<double>(sample_rate) / static_cast<double>(samples.size());
}

// Every 7th 16-bit value, both extremes included, so scaling and sign are both checked.
std::vector<int16_t> pcm16_ramp() {
  std::vector<int16_t> values;
  for (int v = -32768; v <= 32767; v += 7) values.push_back(static_cast<int16_t>(v));
  values.push_back(32767);
  return values;
}

SampleRejected expect_rejected(const fs::path& path, RejectReason reason, bool probe_too = true) {
  try {
    load_audio(path, 22050);
  } catch (const SampleRejected& rejected) {
    EXPECT_EQ(rejected.reason(), reason) << rejected.what();
    EXPECT_NE(rejected.detail().find(path.string()), std::string::npos)
        << "the message must name the file: " << rejected.what();
    if (probe_too) {
      try {
        probe_audio(path);
        ADD_FAILURE() << "probe_audio accepted " << path;
      } catch (const SampleRejected& probed) {
        EXPECT_EQ(probed.reason(), reason) << probed.what();
      }
    }
    return rejected;
  }
  ADD_FAILURE() << "load_audio accepted " << path;
  return SampleRejected(reason, "");
}

TEST_F(AudioTest, Pcm16ScalesByTwoToTheFifteen) {
  const auto values = pcm16_ramp();
  const fs::path path = dir_ / "pcm16.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 22050, 1, values);
  const std::vector<float> loaded = load_audio(path, 22050);
  ASSERT_EQ(loaded.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(loaded[i], static_cast<float>(values[i]) / 32768.0f) << "sample " << i;
  }
  EXPECT_EQ(loaded.front(), -1.0f);
}

// A WAV file built byte by byte: "fmt " (PCM, 16-bit), then `before` chunks, the data chunk
// (declaring data_bytes, or the samples' size when 0), then `after` bytes.
std::vector<char> pcm16_wav(int channels, int rate, const std::vector<int16_t>& interleaved,
                            const std::vector<std::pair<std::string, std::string>>& before,
                            uint32_t data_bytes = 0, const std::string& after = "") {
  std::string body = "WAVE";
  auto u32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  auto u16 = [](uint16_t v) { return std::string{char(v), char(v >> 8)}; };
  body += "fmt " + u32(16) + u16(1) + u16(static_cast<uint16_t>(channels)) + u32(rate) +
          u32(rate * channels * 2) + u16(static_cast<uint16_t>(channels * 2)) + u16(16);
  for (const auto& [tag, bytes] : before) {
    body += tag + u32(static_cast<uint32_t>(bytes.size())) + bytes;
    if (bytes.size() % 2 == 1) body += '\0';
  }
  const std::string samples(reinterpret_cast<const char*>(interleaved.data()), interleaved.size() * 2);
  body += "data" + u32(data_bytes != 0 ? data_bytes : static_cast<uint32_t>(samples.size())) + samples + after;
  const std::string file = "RIFF" + u32(static_cast<uint32_t>(body.size())) + body;
  return std::vector<char>(file.begin(), file.end());
}

// load_audio's own 16-bit WAV reader against libsndfile on the same files: the same frame count,
// rate and channels from probe_audio, and bit-identical mono samples from load_audio, for layouts
// that take the direct path (extra chunks before or after the data, several channels, an odd data
// size) and ones that go to libsndfile (an odd-sized chunk before the data).
TEST_F(AudioTest, Pcm16WavReaderEqualsLibsndfile) {
  std::mt19937 random(11);
  struct Case {
    const char* name;
    int channels;
    std::vector<std::pair<std::string, std::string>> before;
    uint32_t data_bytes;
    std::string after;
  };
  const std::vector<Case> cases = {
      {"mono", 1, {}, 0, ""},
      {"stereo_list_before", 2, {{"LIST", std::string(26, 'x')}}, 0, ""},
      {"three_channels_list_after", 3, {}, 0, std::string("LIST") + std::string("\x04\0\0\0abcd", 8)},
      {"odd_chunk_before", 1, {{"junk", std::string(17, 'j')}}, 0, ""},
      {"odd_data_size", 2, {}, 4 * 999 + 1, std::string(1, '\0')},
      // probe_audio reads 4 KiB first, then 64 KiB for a longer header, then asks libsndfile.
      {"header_past_4_kib", 1, {{"LIST", std::string(6000, 'x')}}, 0, ""},
      {"header_past_64_kib", 2, {{"LIST", std::string(70000, 'x')}}, 0, ""},
  };
  for (const Case& c : cases) {
    std::vector<int16_t> interleaved(static_cast<size_t>(1000 * c.channels));
    for (auto& v : interleaved) v = static_cast<int16_t>(random());
    const fs::path path = dir_ / (std::string(c.name) + ".wav");
    const std::vector<char> bytes = pcm16_wav(c.channels, 16000, interleaved, c.before, c.data_bytes, c.after);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

    SF_INFO info{};
    SNDFILE* file = sf_open(path.c_str(), SFM_READ, &info);
    ASSERT_NE(file, nullptr) << c.name << ": " << sf_strerror(nullptr);
    sf_close(file);
    const AudioInfo probed = probe_audio(path);
    EXPECT_EQ(probed.frames, info.frames) << c.name;
    EXPECT_EQ(probed.sample_rate, info.samplerate) << c.name;
    EXPECT_EQ(probed.channels, info.channels) << c.name;

    const std::vector<float> reference = libsndfile_decode(path);
    std::vector<float> mono(static_cast<size_t>(info.frames));
    for (size_t i = 0; i < mono.size(); ++i) {
      float sum = 0.0f;
      for (int ch = 0; ch < c.channels; ++ch) sum += reference[i * c.channels + ch];
      mono[i] = sum * (1.0f / static_cast<float>(c.channels));
    }
    std::vector<float> loaded(7, 0.5f);  // reused: what was in it must not leak through
    load_audio(path, 16000, loaded);
    EXPECT_EQ(loaded, mono) << c.name;
  }
}

TEST_F(AudioTest, Pcm24ScalesByTwoToTheTwentyThree) {
  // sf_write_int takes 32-bit values; a 24-bit file keeps their top 24 bits.
  std::vector<int32_t> values;
  std::vector<float> expected;
  for (int32_t v = -(1 << 23); v < (1 << 23); v += 4099) {
    values.push_back(v * 256);
    expected.push_back(static_cast<float>(v) / 8388608.0f);  // exact: 24 bits fit a float
  }
  const fs::path path = dir_ / "pcm24.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_24, 44100, 1, values);
  EXPECT_EQ(load_audio(path, 44100), expected);
}

TEST_F(AudioTest, Pcm32AndFloatPassLibsndfileThroughBitExact) {
  std::mt19937 random(7);
  std::vector<int32_t> ints(10000);
  for (auto& v : ints) v = static_cast<int32_t>(random());
  const fs::path pcm32 = dir_ / "pcm32.wav";
  write_audio(pcm32, SF_FORMAT_WAV | SF_FORMAT_PCM_32, 16000, 1, ints);
  const std::vector<float> loaded = load_audio(pcm32, 16000);
  EXPECT_EQ(loaded, libsndfile_decode(pcm32));
  ASSERT_EQ(loaded.size(), ints.size());
  for (size_t i = 0; i < ints.size(); ++i) {
    ASSERT_NEAR(loaded[i], ints[i] / 2147483648.0, 1e-7) << "sample " << i;
  }

  // Float files are not rescaled or clipped: 1.5 stays 1.5.
  std::vector<float> floats = sine(300.0, 16000, 5000, 0.9);
  floats[10] = 1.5f;
  floats[11] = -1.25f;
  const fs::path float_wav = dir_ / "float.wav";
  write_audio(float_wav, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, floats);
  EXPECT_EQ(load_audio(float_wav, 16000), floats);
}

TEST_F(AudioTest, FlacIsLossless) {
  const auto values = pcm16_ramp();
  const fs::path path = dir_ / "ramp.flac";
  write_audio(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 1, values);
  const std::vector<float> loaded = load_audio(path, 22050);
  ASSERT_EQ(loaded.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(loaded[i], static_cast<float>(values[i]) / 32768.0f) << "sample " << i;
  }
}

// Native FLAC is decoded by libFLAC directly (dataset/audio.cpp): its samples must be
// libsndfile's bit for bit, at every bit depth libsndfile writes and with several channels
// (downmixed as decode_mono does: the channels summed in order, times 1/channels).
TEST_F(AudioTest, FlacReaderEqualsLibsndfile) {
  std::mt19937 random(17);
  struct Case {
    const char* name;
    int subformat;
    int channels;
  };
  for (const Case& c : {Case{"pcm16_mono", SF_FORMAT_PCM_16, 1}, Case{"pcm24_stereo", SF_FORMAT_PCM_24, 2},
                        Case{"pcm8_three_channels", SF_FORMAT_PCM_S8, 3}}) {
    std::vector<int32_t> interleaved(static_cast<size_t>(30000 * c.channels));
    for (auto& v : interleaved) v = static_cast<int32_t>(random());  // full scale: libsndfile cuts to the depth
    const fs::path path = dir_ / (std::string(c.name) + ".flac");
    write_audio(path, SF_FORMAT_FLAC | c.subformat, 22050, c.channels, interleaved);
    const std::vector<float> reference = libsndfile_decode(path);
    std::vector<float> mono(reference.size() / static_cast<size_t>(c.channels));
    for (size_t i = 0; i < mono.size(); ++i) {
      float sum = 0.0f;
      for (int ch = 0; ch < c.channels; ++ch) sum += reference[i * c.channels + ch];
      mono[i] = c.channels == 1 ? sum : sum * (1.0f / static_cast<float>(c.channels));
    }
    std::vector<float> loaded(11, 0.25f);  // reused: what was in it must not leak through
    load_audio(path, 22050, loaded);
    ASSERT_EQ(loaded.size(), mono.size()) << c.name;
    EXPECT_EQ(loaded, mono) << c.name;
    const AudioInfo probed = probe_audio(path);  // STREAMINFO read by sluice, not libsndfile
    EXPECT_EQ(probed.frames, static_cast<int64_t>(mono.size())) << c.name;
    EXPECT_EQ(probed.sample_rate, 22050) << c.name;
    EXPECT_EQ(probed.channels, c.channels) << c.name;
  }
}

// A STREAMINFO total of 0 means "length unknown": rejected as libsndfile's unknown length always
// was (truncated_audio, "the stream has no end"), by the probe and by the decoder.
TEST_F(AudioTest, FlacOfUnknownLengthIsRejectedAsTruncated) {
  const fs::path path = dir_ / "unknown_length.flac";
  write_audio(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 1, pcm16_ramp());
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  char streaminfo[34];
  file.seekg(8);
  file.read(streaminfo, sizeof(streaminfo));
  streaminfo[13] = static_cast<char>(streaminfo[13] & 0xf0);  // the 36-bit total samples: 0
  std::fill(streaminfo + 14, streaminfo + 18, '\0');
  file.seekp(8);
  file.write(streaminfo, sizeof(streaminfo));
  file.close();
  const SampleRejected rejected = expect_rejected(path, RejectReason::truncated_audio);
  EXPECT_NE(rejected.detail().find("has no end"), std::string::npos) << rejected.what();
}

// Bytes that start like a FLAC stream but hold no STREAMINFO: unreadable, named.
TEST_F(AudioTest, FlacWithoutStreaminfoIsUnreadable) {
  const fs::path path = dir_ / "no_streaminfo.flac";
  std::ofstream(path, std::ios::binary) << "fLaC" << std::string(200, '\x7f');
  expect_rejected(path, RejectReason::unreadable_audio);
}

TEST_F(AudioTest, OggVorbisDecodesCloseToTheOriginal) {
  const std::vector<float> tone = sine(440.0, 22050, 22050, 0.5);
  const fs::path path = dir_ / "tone.ogg";
  write_audio(path, SF_FORMAT_OGG | SF_FORMAT_VORBIS, 22050, 1, tone);
  const std::vector<float> loaded = load_audio(path, 22050);
  ASSERT_EQ(loaded.size(), tone.size());
  EXPECT_EQ(loaded, libsndfile_decode(path));
  // Vorbis is lossy: require the error to be 30 dB below the signal.
  double signal = 0.0, error = 0.0;
  for (size_t i = 0; i < tone.size(); ++i) {
    signal += double{tone[i]} * tone[i];
    error += (double{loaded[i]} - tone[i]) * (double{loaded[i]} - tone[i]);
  }
  EXPECT_GT(10.0 * std::log10(signal / error), 30.0);
}

TEST_F(AudioTest, ChannelsAreAveraged) {
  const size_t frames = 3000;
  const std::vector<float> left = sine(200.0, 22050, frames, 0.8);
  const std::vector<float> right = sine(3000.0, 22050, frames, 0.3);
  std::vector<float> stereo;
  for (size_t i = 0; i < frames; ++i) {
    stereo.push_back(left[i]);
    stereo.push_back(right[i]);
  }
  const fs::path path = dir_ / "stereo.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 2, stereo);
  const std::vector<float> mono = load_audio(path, 22050);
  ASSERT_EQ(mono.size(), frames);
  for (size_t i = 0; i < frames; ++i) {
    ASSERT_EQ(mono[i], (left[i] + right[i]) * 0.5f) << "frame " << i;  // exact: halving is exact
  }

  // Three channels: the 1/3 weight rounds, so compare to the double-precision mean.
  std::vector<float> three;
  for (size_t i = 0; i < frames; ++i) {
    three.insert(three.end(), {left[i], right[i], 0.25f});
  }
  const fs::path path3 = dir_ / "three.wav";
  write_audio(path3, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 3, three);
  const std::vector<float> mono3 = load_audio(path3, 22050);
  ASSERT_EQ(mono3.size(), frames);
  for (size_t i = 0; i < frames; ++i) {
    ASSERT_NEAR(mono3[i], (double{left[i]} + right[i] + 0.25) / 3.0, 1e-7) << "frame " << i;
  }
  EXPECT_EQ(probe_audio(path3).channels, 3);
}

TEST_F(AudioTest, DownsamplingKeepsPitchAndLength) {
  const size_t n = 44100;
  const fs::path path = dir_ / "tone44k.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 44100, 1, sine(440.0, 44100, n, 0.5));
  const std::vector<float> resampled = load_audio(path, 22050);
  EXPECT_EQ(resampled.size(), 22050u);
  EXPECT_NEAR(rising_zero_crossings_per_second(resampled, 22050), 440.0, 1.0);
  // Amplitude survives away from the edges, where the filter has full support.
  float peak = 0.0f;
  for (size_t i = 1000; i + 1000 < resampled.size(); ++i)
    peak = std::max(peak, std::fabs(resampled[i]));
  EXPECT_NEAR(peak, 0.5f, 0.005f);
}

TEST_F(AudioTest, UpsamplingKeepsPitchAndLength) {
  const size_t n = 16000 + 123;
  const fs::path path = dir_ / "tone16k.flac";
  std::vector<int16_t> pcm;
  for (float x : sine(1000.0, 16000, n, 0.5))
    pcm.push_back(static_cast<int16_t>(std::lround(x * 32767.0f)));
  write_audio(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, pcm);
  const std::vector<float> resampled = load_audio(path, 22050);
  // load_audio promises exactly round(n * ratio) samples: here round(22219.51) = 22220.
  EXPECT_EQ(resampled.size(), static_cast<size_t>(std::llround(n * 22050.0 / 16000.0)));
  EXPECT_NEAR(rising_zero_crossings_per_second(resampled, 22050), 1000.0, 1.5);
}

TEST_F(AudioTest, ProbeReadsTheHeader) {
  const fs::path path = dir_ / "stereo24.wav";
  std::vector<int32_t> frames(2 * 33075, 0);
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_24, 44100, 2, frames);
  const AudioInfo info = probe_audio(path);
  EXPECT_EQ(info.frames, 33075);
  EXPECT_EQ(info.sample_rate, 44100);
  EXPECT_EQ(info.channels, 2);
  EXPECT_DOUBLE_EQ(info.seconds, 0.75);
}

// MP3 and Ogg are probed from the file read into memory (not by libsndfile on the path): the
// header is libsndfile's all the same, and a file that is not audio is refused with its reason.
TEST_F(AudioTest, ProbeOfCompressedFilesIsLibsndfilesHeader) {
  const std::vector<float> tone = sine(440.0, 22050, 3 * 22050, 0.5);
  const std::vector<std::pair<std::string, int>> formats = {
      {"tone.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III}, {"tone.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS},
      {"tone.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS}};
  for (const auto& [name, format] : formats) {
    const fs::path path = dir_ / name;
    write_audio(path, format, format == (SF_FORMAT_OGG | SF_FORMAT_OPUS) ? 48000 : 22050, 1, tone);
    SF_INFO expected{};
    SNDFILE* file = sf_open(path.c_str(), SFM_READ, &expected);
    ASSERT_NE(file, nullptr) << name << ": " << sf_strerror(nullptr);
    sf_close(file);
    const AudioInfo info = probe_audio(path);
    EXPECT_EQ(info.frames, expected.frames) << name;
    EXPECT_EQ(info.sample_rate, expected.samplerate) << name;
    EXPECT_EQ(info.channels, expected.channels) << name;
    EXPECT_EQ(info.file_bytes, static_cast<int64_t>(fs::file_size(path))) << name;
  }
  const fs::path garbage = dir_ / "garbage.mp3";
  std::ofstream(garbage) << std::string(10000, 'x');
  EXPECT_THROW(probe_audio(garbage), SampleRejected);
}

TEST_F(AudioTest, TargetRateMustBePositive) {
  const fs::path path = dir_ / "short.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 22050, 1, std::vector<int16_t>(100, 1));
  EXPECT_THROW(load_audio(path, 0), ConfigError);
}

TEST_F(AudioTest, RejectsMissingFile) {
  expect_rejected(dir_ / "nowhere.wav", RejectReason::missing_audio);
}

TEST_F(AudioTest, RejectsFileWithoutFrames) {
  const fs::path path = dir_ / "empty.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 22050, 1, std::vector<int16_t>{});
  expect_rejected(path, RejectReason::empty_audio);
}

TEST_F(AudioTest, RejectsGarbageWithLibsndfilesReason) {
  const fs::path path = dir_ / "garbage.wav";
  std::ofstream(path) << "this is a text file, not audio, whatever its extension says\n";
  const SampleRejected rejected = expect_rejected(path, RejectReason::unreadable_audio);
  EXPECT_NE(rejected.detail().find("libsndfile cannot open it: Format not recognised"),
            std::string::npos)
      << rejected.what();
}

// libsndfile itself reports a cut-short WAV as a valid shorter one; the data-chunk size is
// what gives it away.
TEST_F(AudioTest, RejectsWavCutShortOnDisk) {
  const fs::path path = dir_ / "cut.wav";
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 22050, 1, std::vector<int16_t>(22050, 1000));
  fs::resize_file(path, fs::file_size(path) / 2);
  const SampleRejected rejected = expect_rejected(path, RejectReason::truncated_audio);
  EXPECT_NE(rejected.detail().find("declares 44100 bytes"), std::string::npos) << rejected.what();
}

TEST_F(AudioTest, RejectsFlacCutShortOnDisk) {
  // Noise does not compress, so half the file is half the frames.
  std::mt19937 random(3);
  std::vector<int16_t> noise(22050);
  for (auto& v : noise) v = static_cast<int16_t>(random());
  const fs::path path = dir_ / "cut.flac";
  write_audio(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 1, noise);
  fs::resize_file(path, fs::file_size(path) / 2);
  // The FLAC header (STREAMINFO) is intact, so only decoding notices.
  EXPECT_EQ(probe_audio(path).frames, 22050);
  expect_rejected(path, RejectReason::truncated_audio, /*probe_too=*/false);
}

// Corrupt bytes in the middle of a FLAC stream: libFLAC loses sync there; decoding stops at the
// first error, as libsndfile's did, so the clip is truncated_audio naming what was decoded.
TEST_F(AudioTest, RejectsFlacCorruptInTheMiddle) {
  std::mt19937 random(23);
  std::vector<int16_t> noise(44100);
  for (auto& v : noise) v = static_cast<int16_t>(random() % 2000);
  const fs::path path = dir_ / "corrupt.flac";
  write_audio(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 1, noise);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto middle = static_cast<std::streamoff>(fs::file_size(path) / 2);
  file.seekp(middle);
  file.write(std::string(64, '\x5a').c_str(), 64);
  file.close();
  EXPECT_EQ(probe_audio(path).frames, 44100);  // the header is intact
  const SampleRejected rejected = expect_rejected(path, RejectReason::truncated_audio, /*probe_too=*/false);
  EXPECT_NE(rejected.detail().find("of the 44100 frames the header announces"), std::string::npos) << rejected.what();
}

TEST_F(AudioTest, RejectsOggCutShortOnDisk) {
  std::mt19937 random(5);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<float> noise(44100);
  for (auto& v : noise) v = uniform(random);
  const fs::path path = dir_ / "cut.ogg";
  write_audio(path, SF_FORMAT_OGG | SF_FORMAT_VORBIS, 22050, 1, noise);
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_rejected(path, RejectReason::truncated_audio);
}

// espeak-ng --stdout and sox writing to a pipe cannot seek back to fill in the data size and
// leave 0x7ffff000; the file is complete, just with a placeholder.
TEST_F(AudioTest, AcceptsStreamingPlaceholderSize) {
  const fs::path path = dir_ / "streamed.wav";
  const std::vector<int16_t> values(5000, -1234);
  write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 22050, 1, values);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    const auto data =
        std::search(bytes.begin(), bytes.end(), std::begin("data"), std::end("data") - 1);
    ASSERT_NE(data, bytes.end());
    const unsigned char placeholder[4] = {0x00, 0xf0, 0xff, 0x7f};  // 0x7ffff000, little-endian
    file.seekp(data - bytes.begin() + 4);
    file.write(reinterpret_cast<const char*>(placeholder), 4);
  }
  const std::vector<float> loaded = load_audio(path, 22050);
  ASSERT_EQ(loaded.size(), values.size());
  EXPECT_EQ(loaded.back(), -1234.0f / 32768.0f);
}

TEST_F(AudioTest, RejectsNonFiniteSamples) {
  std::vector<float> samples = sine(100.0, 22050, 4000, 0.5);
  samples[1234] = std::numeric_limits<float>::quiet_NaN();
  const fs::path nan_path = dir_ / "nan.wav";
  write_audio(nan_path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 1, samples);
  const SampleRejected rejected =
      expect_rejected(nan_path, RejectReason::non_finite_audio, /*probe_too=*/false);
  EXPECT_NE(rejected.detail().find("sample 1234 is NaN"), std::string::npos) << rejected.what();
  EXPECT_NO_THROW(probe_audio(nan_path));  // the header is fine; only decoding sees samples

  samples[1234] = 0.0f;
  samples[3999] = -std::numeric_limits<float>::infinity();
  const fs::path inf_path = dir_ / "inf.wav";
  write_audio(inf_path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 1, samples);
  expect_rejected(inf_path, RejectReason::non_finite_audio, /*probe_too=*/false);
}

}  // namespace
}  // namespace sluice::dataset
