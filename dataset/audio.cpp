#include "dataset/audio.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

namespace sluice::dataset {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void reject(RejectReason reason, const fs::path& path, const std::string& what) {
  throw SampleRejected(reason, path.string() + ": " + what);
}

// The one layer where libsndfile's return codes become exceptions.
struct SndfileCloser {
  void operator()(SNDFILE* file) const noexcept { sf_close(file); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

struct OpenedAudio {
  SndfilePtr file;
  SF_INFO info{};
};

uint32_t read_u32(const unsigned char* bytes, bool big_endian) {
  if (big_endian) {
    return uint32_t{bytes[0]} << 24 | uint32_t{bytes[1]} << 16 | uint32_t{bytes[2]} << 8 | bytes[3];
  }
  return uint32_t{bytes[3]} << 24 | uint32_t{bytes[2]} << 16 | uint32_t{bytes[1]} << 8 | bytes[0];
}

struct DataChunk {
  uint64_t offset = 0;         // of the first sample byte
  uint32_t declared_size = 0;  // bytes, as written in the chunk header
};

// Walks a RIFF/RIFX file's chunk table up to the "data" chunk. nullopt when the file is not a
// plain RIFF container (RF64 keeps its sizes in a ds64 chunk) or has no data chunk header.
std::optional<DataChunk> find_wav_data_chunk(const fs::path& path, uint64_t file_size) {
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 12> riff{};
  if (!in.read(reinterpret_cast<char*>(riff.data()), riff.size())) return std::nullopt;
  bool big_endian;
  if (std::memcmp(riff.data(), "RIFF", 4) == 0) {
    big_endian = false;
  } else if (std::memcmp(riff.data(), "RIFX", 4) == 0) {
    big_endian = true;
  } else {
    return std::nullopt;
  }
  uint64_t position = riff.size();
  std::array<unsigned char, 8> header{};
  while (position + header.size() <= file_size) {
    in.seekg(static_cast<std::streamoff>(position));
    if (!in.read(reinterpret_cast<char*>(header.data()), header.size())) return std::nullopt;
    const uint32_t size = read_u32(header.data() + 4, big_endian);
    if (std::memcmp(header.data(), "data", 4) == 0) {
      return DataChunk{position + header.size(), size};
    }
    // Chunks are word-aligned: an odd-sized chunk is followed by one pad byte.
    position += header.size() + uint64_t{size} + (size & 1u);
  }
  return std::nullopt;
}

// libsndfile clamps a WAV's frame count to the bytes present and reports no error, so a file cut
// short on disk (interrupted copy, full disk) would otherwise decode as a shorter valid clip.
void check_wav_not_truncated(const fs::path& path, const SF_INFO& info) {
  const int container = info.format & SF_FORMAT_TYPEMASK;
  if (container != SF_FORMAT_WAV && container != SF_FORMAT_WAVEX) return;
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) return;  // sf_open just read it; a racing delete surfaces when decoding
  const auto chunk = find_wav_data_chunk(path, file_size);
  if (!chunk) return;
  // Writers that stream to a pipe cannot seek back to fix the size: sox and espeak-ng leave
  // 0x7ffff000, ffmpeg 0xffffffff, some leave 0. The true length is "what is on disk".
  constexpr uint32_t kStreamingPlaceholder = 0x7ffff000u;
  if (chunk->declared_size == 0 || chunk->declared_size >= kStreamingPlaceholder) return;
  const uint64_t available = file_size > chunk->offset ? file_size - chunk->offset : 0;
  if (chunk->declared_size > available) {
    reject(RejectReason::truncated_audio, path,
           "WAV data chunk declares " + std::to_string(chunk->declared_size) + " bytes but only " +
               std::to_string(available) + " are in the file (cut short on disk?)");
  }
}

// Opens and validates the header: the checks shared by probe_audio and load_audio.
OpenedAudio open_audio(const fs::path& path) {
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (ec) {
    // e.g. a directory on the way that this process may not search
    reject(RejectReason::unreadable_audio, path, "cannot look it up: " + ec.message());
  }
  if (!exists) reject(RejectReason::missing_audio, path, "no such file");
  OpenedAudio opened;
  opened.file.reset(sf_open(path.c_str(), SFM_READ, &opened.info));
  if (!opened.file) {
    // sf_strerror(nullptr) is the last failed sf_open's error, kept in a libsndfile global: if
    // two threads fail at once the text may be the other file's; the reason is still right.
    reject(RejectReason::unreadable_audio, path,
           std::string("libsndfile cannot open it: ") + sf_strerror(nullptr));
  }
  check_wav_not_truncated(path, opened.info);
  if (opened.info.frames == SF_COUNT_MAX) {
    // libsndfile's "length unknown": an Ogg stream whose last page (which carries the final
    // granule position) is missing, i.e. the file was cut short.
    reject(RejectReason::truncated_audio, path,
           "the stream has no end (libsndfile cannot tell its length): file cut short?");
  }
  if (opened.info.frames <= 0) {
    reject(RejectReason::empty_audio, path, "the file holds no audio frames");
  }
  // A corrupt header must not turn into a multi-gigabyte allocation: 2^31 frames is over
  // 6 hours at 96 kHz, far beyond any TTS clip.
  constexpr sf_count_t kMaxFrames = sf_count_t{1} << 31;
  if (opened.info.frames > kMaxFrames) {
    reject(RejectReason::unreadable_audio, path,
           "header announces " + std::to_string(opened.info.frames) +
               " frames, more than any TTS clip: corrupt header?");
  }
  if (opened.info.samplerate <= 0 || opened.info.channels <= 0) {
    reject(RejectReason::unreadable_audio, path,
           "header has sample rate " + std::to_string(opened.info.samplerate) + " and " +
               std::to_string(opened.info.channels) + " channels");
  }
  return opened;
}

// Reads every frame and averages the channels; throws if fewer frames decode than announced.
std::vector<float> decode_mono(OpenedAudio& opened, const fs::path& path) {
  const int64_t frames = opened.info.frames;
  const int channels = opened.info.channels;
  std::vector<float> mono(static_cast<size_t>(frames));
  int64_t decoded = 0;
  if (channels == 1) {
    while (decoded < frames) {
      const sf_count_t got =
          sf_readf_float(opened.file.get(), mono.data() + decoded, frames - decoded);
      if (got <= 0) break;
      decoded += got;
    }
  } else {
    constexpr int64_t kChunkFrames = 4096;
    std::vector<float> interleaved(static_cast<size_t>(kChunkFrames * channels));
    const float scale = 1.0f / static_cast<float>(channels);
    while (decoded < frames) {
      const sf_count_t want = std::min(kChunkFrames, frames - decoded);
      const sf_count_t got = sf_readf_float(opened.file.get(), interleaved.data(), want);
      if (got <= 0) break;
      for (sf_count_t i = 0; i < got; ++i) {
        const float* frame = interleaved.data() + i * channels;
        float sum = 0.0f;
        for (int c = 0; c < channels; ++c) sum += frame[c];
        mono[static_cast<size_t>(decoded + i)] = sum * scale;
      }
      decoded += got;
    }
  }
  // A FLAC cut short stops with "lost sync", a WAV one just ends: both are a short read, which
  // is what truncated_audio means; an error with every frame decoded is something else.
  const bool failed = sf_error(opened.file.get()) != SF_ERR_NO_ERROR;
  const std::string library_says = failed ? std::string(sf_strerror(opened.file.get())) : "";
  if (decoded < frames) {
    reject(RejectReason::truncated_audio, path,
           "decoded " + std::to_string(decoded) + " of the " + std::to_string(frames) +
               " frames the header announces" +
               (failed ? " (libsndfile: " + library_says + ")" : std::string()));
  }
  if (failed) {
    reject(RejectReason::unreadable_audio, path,
           "libsndfile failed while decoding: " + library_says);
  }
  return mono;
}

void check_finite(const std::vector<float>& samples, const fs::path& path) {
  // One branch-free pass (vectorises) first; the scalar search only runs on a bad file.
  bool all_finite = true;
  for (float x : samples) all_finite &= std::isfinite(x);
  if (all_finite) return;
  const auto bad =
      std::find_if(samples.begin(), samples.end(), [](float x) { return !std::isfinite(x); });
  reject(RejectReason::non_finite_audio, path,
         "sample " + std::to_string(bad - samples.begin()) + " is " +
             (std::isnan(*bad) ? "NaN" : "infinite"));
}

std::vector<float> resample(const std::vector<float>& in, int in_rate, int out_rate,
                            const fs::path& path) {
  const double ratio = static_cast<double>(out_rate) / in_rate;
  const auto out_len = static_cast<size_t>(std::llround(static_cast<double>(in.size()) * ratio));
  std::vector<float> out(out_len);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  size_t produced = 0;
  const soxr_error_t error =
      soxr_oneshot(in_rate, out_rate, 1, in.data(), in.size(), nullptr, out.data(), out.size(),
                   &produced, &io, &quality, nullptr);
  if (error != nullptr) {
    throw Error(ErrorKind::internal, "libsoxr failed to resample " + path.string() + " from " +
                                         std::to_string(in_rate) + " to " +
                                         std::to_string(out_rate) + " Hz: " + error);
  }
  // soxr_oneshot flushes its filter, so it fills the buffer unless rounding leaves it one short.
  out.resize(produced);
  return out;
}

}  // namespace

AudioInfo probe_audio(const std::filesystem::path& path) {
  const OpenedAudio opened = open_audio(path);
  AudioInfo info;
  info.frames = opened.info.frames;
  info.sample_rate = opened.info.samplerate;
  info.channels = opened.info.channels;
  info.seconds = static_cast<double>(info.frames) / info.sample_rate;
  return info;
}

std::vector<float> load_audio(const std::filesystem::path& path, int target_sample_rate,
                              AudioLoadSeconds* seconds) {
  if (target_sample_rate <= 0) {
    throw ConfigError("features.sample_rate (" + std::to_string(target_sample_rate) +
                      ") must be positive");
  }
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  OpenedAudio opened = open_audio(path);
  std::vector<float> mono = decode_mono(opened, path);
  opened.file.reset();
  check_finite(mono, path);
  const auto decoded = Clock::now();
  if (seconds != nullptr) seconds->decode = std::chrono::duration<double>(decoded - started).count();
  if (opened.info.samplerate == target_sample_rate) return mono;
  std::vector<float> out = resample(mono, opened.info.samplerate, target_sample_rate, path);
  if (seconds != nullptr) seconds->resample = std::chrono::duration<double>(Clock::now() - decoded).count();
  return out;
}

}  // namespace sluice::dataset
