#include "dataset/audio.h"

#include <FLAC/stream_decoder.h>
#include <errno.h>
#include <fcntl.h>
#include <sndfile.h>
#include <soxr.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "common/file_util.h"
#include "common/finite.h"

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

uint16_t read_u16_le(const unsigned char* bytes) {
  return static_cast<uint16_t>(bytes[0] | (bytes[1] << 8));
}

// The first bytes of a file (or all of them), read with one open + fstat + read + close instead of
// the dozens of small reads and seeks libsndfile's own header parser makes on a path.
struct FileBytes {
  std::vector<unsigned char> bytes;  // bytes [0, bytes.size()) of the file
  uint64_t file_size = 0;
  int64_t modified_ns = 0;
};

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// Reads up to `limit` bytes from the start of path into `out` (whose capacity is reused).
// A file that is not there is missing_audio; one that cannot be opened or read is unreadable.
// O_NONBLOCK: opening a named pipe (a FIFO in the corpus) would otherwise wait for a writer
// forever; a regular file's reads ignore it, and fstat below rejects everything else.
void read_file_start(const fs::path& path, uint64_t limit, FileBytes& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) reject(RejectReason::missing_audio, path, "no such file");
    // No permission: the machine refused, not the sample (EnvironmentError, exit 5, the file named).
    if (error == EACCES || error == EPERM) throw_file_error(error, "open the audio file", path.string(), ErrorKind::data);
    reject(RejectReason::unreadable_audio, path, std::string("cannot open it: ") + std::strerror(error));
  }
  const FdCloser closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    reject(RejectReason::unreadable_audio, path, "not a regular file");
  }
  out.file_size = static_cast<uint64_t>(status.st_size);
  out.modified_ns = modified_ns(status);
  const uint64_t want = std::min(out.file_size, limit);
  out.bytes.resize(static_cast<size_t>(want));
  uint64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, out.bytes.data() + got, static_cast<size_t>(want - got), static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) reject(RejectReason::unreadable_audio, path, std::string("cannot read it: ") + std::strerror(errno));
    if (n == 0) break;  // shrank under us: what is left is what the decoder sees
    got += static_cast<uint64_t>(n);
  }
  out.bytes.resize(static_cast<size_t>(got));
  if (got < want) out.file_size = got;
}

// What the chunk table of a RIFF/RIFX file says, as far as the bytes at hand reach.
struct WavLayout {
  bool big_endian = false;
  bool odd_chunk = false;  // an odd-sized chunk came first: writers disagree on its pad byte
  bool has_fmt = false;
  uint16_t format_tag = 0;
  uint16_t channels = 0;
  uint32_t sample_rate = 0;
  uint16_t block_align = 0;
  uint16_t bits = 0;
  uint64_t data_offset = 0;    // of the first sample byte
  uint32_t declared_size = 0;  // bytes, as written in the data chunk header
};

// Walks a RIFF/RIFX file's chunk table up to the "data" chunk, within `bytes` (the file's first
// bytes; file_size is the whole file's). nullopt when the file is not a plain RIFF container (RF64
// keeps its sizes in a ds64 chunk) or the data chunk header is not within the bytes at hand.
std::optional<WavLayout> find_wav_layout(const std::vector<unsigned char>& bytes, uint64_t file_size) {
  if (bytes.size() < 12) return std::nullopt;
  WavLayout layout;
  if (std::memcmp(bytes.data(), "RIFF", 4) == 0) {
    layout.big_endian = false;
  } else if (std::memcmp(bytes.data(), "RIFX", 4) == 0) {
    layout.big_endian = true;
  } else {
    return std::nullopt;
  }
  uint64_t position = 12;
  constexpr uint64_t kHeader = 8;
  while (position + kHeader <= std::min<uint64_t>(file_size, bytes.size())) {
    const unsigned char* header = bytes.data() + position;
    const uint32_t size = read_u32(header + 4, layout.big_endian);
    if (std::memcmp(header, "data", 4) == 0) {
      layout.data_offset = position + kHeader;
      layout.declared_size = size;
      return layout;
    }
    if (std::memcmp(header, "fmt ", 4) == 0 && size >= 16 && position + kHeader + 16 <= bytes.size() &&
        !layout.big_endian) {
      const unsigned char* fmt = header + kHeader;
      layout.has_fmt = true;
      layout.format_tag = read_u16_le(fmt);
      layout.channels = read_u16_le(fmt + 2);
      layout.sample_rate = read_u32(fmt + 4, false);
      layout.block_align = read_u16_le(fmt + 12);
      layout.bits = read_u16_le(fmt + 14);
    }
    layout.odd_chunk |= (size & 1u) != 0;
    // Chunks are word-aligned: an odd-sized chunk is followed by one pad byte.
    position += kHeader + uint64_t{size} + (size & 1u);
  }
  return std::nullopt;
}

// Writers that stream to a pipe cannot seek back to fix the size: sox and espeak-ng leave
// 0x7ffff000, ffmpeg 0xffffffff, some leave 0. The true length is "what is on disk".
bool declares_placeholder_size(const WavLayout& layout) {
  constexpr uint32_t kStreamingPlaceholder = 0x7ffff000u;
  return layout.declared_size == 0 || layout.declared_size >= kStreamingPlaceholder;
}

// libsndfile clamps a WAV's frame count to the bytes present and reports no error, so a file cut
// short on disk (interrupted copy, full disk) would otherwise decode as a shorter valid clip.
void check_wav_not_truncated(const fs::path& path, const std::optional<WavLayout>& layout, uint64_t file_size) {
  if (!layout || declares_placeholder_size(*layout)) return;
  const uint64_t available = file_size > layout->data_offset ? file_size - layout->data_offset : 0;
  if (layout->declared_size > available) {
    reject(RejectReason::truncated_audio, path,
           "WAV data chunk declares " + std::to_string(layout->declared_size) + " bytes but only " +
               std::to_string(available) + " are in the file (cut short on disk?)");
  }
}

// The plain 16-bit PCM WAV that TTS corpora (LJSpeech, LibriTTS) ship, which load_audio reads
// without libsndfile: little-endian RIFF, format tag 1, no odd-sized chunk before the data, a
// complete data chunk with a real size. Everything else goes through libsndfile. The samples are
// libsndfile's exactly: it also scales 16-bit PCM by 1/32768 in float.
bool is_plain_pcm16(const std::optional<WavLayout>& layout, uint64_t file_size) {
  return layout && !layout->big_endian && layout->has_fmt && !layout->odd_chunk &&
         layout->format_tag == 1 && layout->bits == 16 && layout->channels > 0 &&
         layout->block_align == 2 * layout->channels && layout->sample_rate > 0 &&
         !declares_placeholder_size(*layout) &&
         layout->data_offset + layout->declared_size <= file_size;
}

// The header checks shared by every way of opening a file (what libsndfile or the WAV parser
// announced): a length that is known, nonzero and sane, a positive rate and channel count.
void check_header(const fs::path& path, const SF_INFO& info) {
  if (info.frames == SF_COUNT_MAX) {
    // libsndfile's "length unknown": an Ogg stream whose last page (which carries the final
    // granule position) is missing, i.e. the file was cut short.
    reject(RejectReason::truncated_audio, path,
           "the stream has no end (libsndfile cannot tell its length): file cut short?");
  }
  if (info.frames <= 0) {
    reject(RejectReason::empty_audio, path, "the file holds no audio frames");
  }
  // A corrupt header must not turn into a multi-gigabyte allocation: 2^31 frames is over
  // 6 hours at 96 kHz, far beyond any TTS clip.
  constexpr sf_count_t kMaxFrames = sf_count_t{1} << 31;
  if (info.frames > kMaxFrames) {
    reject(RejectReason::unreadable_audio, path,
           "header announces " + std::to_string(info.frames) +
               " frames, more than any TTS clip: corrupt header?");
  }
  if (info.samplerate <= 0 || info.channels <= 0) {
    reject(RejectReason::unreadable_audio, path,
           "header has sample rate " + std::to_string(info.samplerate) + " and " +
               std::to_string(info.channels) + " channels");
  }
}

SF_INFO pcm16_info(const WavLayout& layout) {
  SF_INFO info{};
  info.frames = layout.declared_size / layout.block_align;
  info.samplerate = static_cast<int>(layout.sample_rate);
  info.channels = layout.channels;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  return info;
}

// libsndfile reading from bytes in memory (sf_open_virtual): no system calls while it parses.
struct MemoryStream {
  const unsigned char* data;
  sf_count_t size;
  sf_count_t position = 0;
};

SF_VIRTUAL_IO memory_io() {
  SF_VIRTUAL_IO io{};
  io.get_filelen = [](void* user) { return static_cast<MemoryStream*>(user)->size; };
  io.seek = [](sf_count_t offset, int whence, void* user) {
    auto* stream = static_cast<MemoryStream*>(user);
    const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? stream->position : stream->size;
    stream->position = std::clamp<sf_count_t>(base + offset, 0, stream->size);
    return stream->position;
  };
  io.read = [](void* to, sf_count_t count, void* user) {
    auto* stream = static_cast<MemoryStream*>(user);
    const sf_count_t n = std::clamp<sf_count_t>(stream->size - stream->position, 0, count);
    std::memcpy(to, stream->data + stream->position, static_cast<size_t>(n));
    stream->position += n;
    return n;
  };
  io.write = [](const void*, sf_count_t, void*) { return sf_count_t{0}; };
  io.tell = [](void* user) { return static_cast<MemoryStream*>(user)->position; };
  return io;
}

// Opens a file by path with libsndfile and validates the header (probe_audio's way for every file
// but a plain 16-bit WAV: an Ogg or MP3 length may need the file's end, which a prefix lacks).
OpenedAudio open_audio(const fs::path& path, const FileBytes& start) {
  OpenedAudio opened;
  opened.file.reset(sf_open(path.c_str(), SFM_READ, &opened.info));
  if (!opened.file) {
    // sf_strerror(nullptr) is the last failed sf_open's error, kept in a libsndfile global: if
    // two threads fail at once the text may be the other file's; the reason is still right.
    reject(RejectReason::unreadable_audio, path,
           std::string("libsndfile cannot open it: ") + sf_strerror(nullptr));
  }
  const int container = opened.info.format & SF_FORMAT_TYPEMASK;
  if (container == SF_FORMAT_WAV || container == SF_FORMAT_WAVEX) {
    check_wav_not_truncated(path, find_wav_layout(start.bytes, start.file_size), start.file_size);
  }
  check_header(path, opened.info);
  return opened;
}

// The same on a whole file already in memory (load_audio's way for everything libsndfile decodes).
OpenedAudio open_audio_in_memory(const fs::path& path, const FileBytes& whole, MemoryStream& stream,
                                 SF_VIRTUAL_IO& io) {
  OpenedAudio opened;
  stream = MemoryStream{whole.bytes.data(), static_cast<sf_count_t>(whole.bytes.size())};
  io = memory_io();
  opened.file.reset(sf_open_virtual(&io, SFM_READ, &opened.info, &stream));
  if (!opened.file) {
    reject(RejectReason::unreadable_audio, path,
           std::string("libsndfile cannot open it: ") + sf_strerror(nullptr));
  }
  const int container = opened.info.format & SF_FORMAT_TYPEMASK;
  if (container == SF_FORMAT_WAV || container == SF_FORMAT_WAVEX) {
    check_wav_not_truncated(path, find_wav_layout(whole.bytes, whole.file_size), whole.file_size);
  }
  check_header(path, opened.info);
  return opened;
}

// Reads every frame into `mono` (resized; its capacity is reused) and averages the channels;
// throws if fewer frames decode than announced.
void decode_mono(OpenedAudio& opened, const fs::path& path, std::vector<float>& mono) {
  const int64_t frames = opened.info.frames;
  const int channels = opened.info.channels;
  mono.resize(static_cast<size_t>(frames));
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
    thread_local std::vector<float> interleaved;
    interleaved.resize(static_cast<size_t>(kChunkFrames * channels));
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
}

// 16-bit PCM straight from the file's bytes, as libsndfile computes it: each sample times
// 1/32768 in float, channels summed in order and multiplied by 1/channels. Bit-identical to
// decode_mono on the same file (tests/dataset/test_audio.cpp checks it).
void decode_pcm16(const WavLayout& layout, const FileBytes& whole, std::vector<float>& mono) {
  const SF_INFO info = pcm16_info(layout);
  const int channels = info.channels;
  const auto frames = static_cast<size_t>(info.frames);
  mono.resize(frames);
  const unsigned char* data = whole.bytes.data() + layout.data_offset;
  const float to_float = 1.0f / 32768.0f;
  auto sample = [data](size_t i) {
    int16_t value;
    std::memcpy(&value, data + 2 * i, 2);  // little-endian file, little-endian host (x86, arm)
    return static_cast<float>(value);
  };
  if (channels == 1) {
    size_t i = 0;
#if defined(__SSE2__)
    // 8 samples per step: sign-extend to int32, convert, scale (each exact in float, so the same
    // bits as the scalar loop; the project builds at -O2, where GCC leaves that loop scalar).
    const __m128 scale = _mm_set1_ps(to_float);
    for (; i + 8 <= frames; i += 8) {
      const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 2 * i));
      const __m128i low = _mm_srai_epi32(_mm_unpacklo_epi16(values, values), 16);
      const __m128i high = _mm_srai_epi32(_mm_unpackhi_epi16(values, values), 16);
      _mm_storeu_ps(mono.data() + i, _mm_mul_ps(_mm_cvtepi32_ps(low), scale));
      _mm_storeu_ps(mono.data() + i + 4, _mm_mul_ps(_mm_cvtepi32_ps(high), scale));
    }
#endif
    for (; i < frames; ++i) mono[i] = sample(i) * to_float;
    return;
  }
  const float scale = 1.0f / static_cast<float>(channels);
  for (size_t i = 0; i < frames; ++i) {
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += sample(i * channels + c) * to_float;
    mono[i] = sum * scale;
  }
}

// --- native FLAC through libFLAC ----------------------------------------------------------------
// libsndfile decodes FLAC with libFLAC too, then copies every block through its own buffers;
// calling libFLAC directly decoded the same files 1.11-1.23x faster (bench/dataset/bench_decode,
// docs/performance.md) with the same samples bit for bit: libsndfile's scaling (each sample times
// 1/2^(bits-1) in float), channels summed in order and multiplied by 1/channels, STREAMINFO's
// total samples as the frame count, and at most that many frames. A total of 0 means "unknown" in
// FLAC; libsndfile reports it as a length it cannot tell (SF_COUNT_MAX), which check_header
// rejects as truncated_audio, and so does this path. This is the one layer where libFLAC's
// statuses become rejections.

// STREAMINFO's total samples as libsndfile's frame count (0, unknown, as SF_COUNT_MAX).
sf_count_t flac_frames(uint64_t total_samples) {
  return total_samples == 0 ? SF_COUNT_MAX : static_cast<sf_count_t>(total_samples);
}

bool is_native_flac(const FileBytes& file) {
  return file.bytes.size() >= 4 && std::memcmp(file.bytes.data(), "fLaC", 4) == 0;
}

// What the callbacks share with decode_flac: the input, the output, and what went wrong.
struct FlacDecoding {
  const FileBytes* file = nullptr;
  size_t position = 0;
  std::vector<float>* mono = nullptr;
  bool have_info = false;
  SF_INFO info{};
  int64_t decoded = 0;  // frames written to mono
  bool failed = false;
  FLAC__StreamDecoderErrorStatus first_error = FLAC__STREAM_DECODER_ERROR_STATUS_LOST_SYNC;
};

FLAC__StreamDecoderReadStatus flac_read(const FLAC__StreamDecoder*, FLAC__byte buffer[], size_t* bytes, void* user) {
  auto* d = static_cast<FlacDecoding*>(user);
  *bytes = std::min(*bytes, d->file->bytes.size() - d->position);
  std::memcpy(buffer, d->file->bytes.data() + d->position, *bytes);
  d->position += *bytes;
  return *bytes > 0 ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
}

void flac_metadata(const FLAC__StreamDecoder*, const FLAC__StreamMetadata* block, void* user) {
  if (block->type != FLAC__METADATA_TYPE_STREAMINFO) return;
  auto* d = static_cast<FlacDecoding*>(user);
  const auto& stream = block->data.stream_info;
  d->have_info = true;
  d->info.frames = flac_frames(stream.total_samples);
  d->info.samplerate = static_cast<int>(stream.sample_rate);
  d->info.channels = static_cast<int>(stream.channels);
  d->info.format = SF_FORMAT_FLAC;
}

FLAC__StreamDecoderWriteStatus flac_write(const FLAC__StreamDecoder*, const FLAC__Frame* frame,
                                          const FLAC__int32* const buffer[], void* user) {
  auto* d = static_cast<FlacDecoding*>(user);
  // libsndfile stops reading at libFLAC's first error (a corrupt or missing frame) and so does
  // this path: the frames before it are what was decoded, and the clip is truncated_audio.
  if (d->failed) return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
  const auto take = static_cast<unsigned>(
      std::min<int64_t>(frame->header.blocksize, static_cast<int64_t>(d->mono->size()) - d->decoded));
  const unsigned channels = frame->header.channels;
  if (take == 0 || channels == 0 || frame->header.bits_per_sample == 0 || frame->header.bits_per_sample > 32) {
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;  // past the announced frames: libsndfile stops there too
  }
  const float norm = 1.0f / static_cast<float>(uint64_t{1} << (frame->header.bits_per_sample - 1));
  float* out = d->mono->data() + d->decoded;
  if (channels == 1) {
    for (unsigned i = 0; i < take; ++i) out[i] = static_cast<float>(buffer[0][i]) * norm;
  } else {
    const float scale = 1.0f / static_cast<float>(channels);
    for (unsigned i = 0; i < take; ++i) {
      float sum = 0.0f;
      for (unsigned c = 0; c < channels; ++c) sum += static_cast<float>(buffer[c][i]) * norm;
      out[i] = sum * scale;
    }
  }
  d->decoded += take;
  return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
}

void flac_error(const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus status, void* user) {
  auto* d = static_cast<FlacDecoding*>(user);
  if (!d->failed) d->first_error = status;
  d->failed = true;
}

// STREAMINFO, the first metadata block of every native FLAC stream (the FLAC format's fixed
// layout: after "fLaC" and a 4-byte block header, 34 bytes whose bytes 10-17 hold the sample rate
// (20 bits), channels - 1 (3), bits per sample - 1 (5) and the total samples (36)), read from the
// file's first bytes: what libFLAC's metadata callback gives load_audio, without a decoder.
// nullopt when the first block is not a whole STREAMINFO (probe_audio then asks libsndfile).
std::optional<SF_INFO> flac_streaminfo(const FileBytes& file) {
  const std::vector<unsigned char>& b = file.bytes;
  constexpr size_t kEnd = 8 + 34;
  if (!is_native_flac(file) || b.size() < kEnd || (b[4] & 0x7f) != 0) return std::nullopt;
  const uint32_t length = uint32_t{b[5]} << 16 | uint32_t{b[6]} << 8 | b[7];
  if (length < 34) return std::nullopt;
  const unsigned char* s = b.data() + 8;
  SF_INFO info{};
  info.samplerate = static_cast<int>(uint32_t{s[10]} << 12 | uint32_t{s[11]} << 4 | s[12] >> 4);
  info.channels = ((s[12] >> 1) & 0x7) + 1;
  info.frames = flac_frames(uint64_t{s[13] & 0x0fu} << 32 | uint64_t{s[14]} << 24 | uint64_t{s[15]} << 16 |
                            uint64_t{s[16]} << 8 | s[17]);
  info.format = SF_FORMAT_FLAC;
  return info;
}

struct FlacDecoderDeleter {
  void operator()(FLAC__StreamDecoder* decoder) const noexcept { FLAC__stream_decoder_delete(decoder); }
};

// Decodes a native FLAC file held in `file` to mono at its own rate; returns the rate. The
// decoder is per thread and reused (FLAC__stream_decoder_finish readies it for the next file).
int decode_flac(const fs::path& path, const FileBytes& file, std::vector<float>& mono) {
  thread_local std::unique_ptr<FLAC__StreamDecoder, FlacDecoderDeleter> decoder(FLAC__stream_decoder_new());
  if (!decoder) throw Error(ErrorKind::internal, "libFLAC could not allocate a decoder (out of memory?)");
  FlacDecoding d;
  d.file = &file;
  d.mono = &mono;
  if (FLAC__stream_decoder_init_stream(decoder.get(), flac_read, nullptr, nullptr, nullptr, nullptr, flac_write,
                                       flac_metadata, flac_error, &d) != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
    throw Error(ErrorKind::internal, "libFLAC could not start a decoder for " + path.string());
  }
  struct Finish {
    FLAC__StreamDecoder* decoder;
    ~Finish() { FLAC__stream_decoder_finish(decoder); }
  } finish{decoder.get()};
  FLAC__stream_decoder_process_until_end_of_metadata(decoder.get());
  if (!d.have_info) {
    reject(RejectReason::unreadable_audio, path,
           std::string("libFLAC finds no STREAMINFO header: ") +
               (d.failed ? FLAC__StreamDecoderErrorStatusString[d.first_error] : "not a FLAC stream"));
  }
  check_header(path, d.info);
  mono.resize(static_cast<size_t>(d.info.frames));
  FLAC__stream_decoder_process_until_end_of_stream(decoder.get());
  // As decode_mono: a FLAC cut short loses sync or just ends, a short read, which is what
  // truncated_audio means; an error with every frame decoded is something else.
  const std::string library_says = d.failed ? FLAC__StreamDecoderErrorStatusString[d.first_error] : "";
  if (d.decoded < d.info.frames) {
    reject(RejectReason::truncated_audio, path,
           "decoded " + std::to_string(d.decoded) + " of the " + std::to_string(d.info.frames) +
               " frames the header announces" + (d.failed ? " (libFLAC: " + library_says + ")" : std::string()));
  }
  if (d.failed) reject(RejectReason::unreadable_audio, path, "libFLAC failed while decoding: " + library_says);
  return d.info.samplerate;  // integer samples: always finite
}

void check_finite(const std::vector<float>& samples, const fs::path& path) {
  const auto n = static_cast<int64_t>(samples.size());
  const int64_t bad = first_non_finite(samples.data(), n);
  if (bad == n) return;
  const bool nan = std::isnan(samples[static_cast<size_t>(bad)]);
  reject(RejectReason::non_finite_audio, path, "sample " + std::to_string(bad) + " is " + (nan ? "NaN" : "infinite"));
}

void resample(const std::vector<float>& in, int in_rate, int out_rate, const fs::path& path,
              std::vector<float>& out) {
  const double ratio = static_cast<double>(out_rate) / in_rate;
  const auto out_len = static_cast<size_t>(std::llround(static_cast<double>(in.size()) * ratio));
  out.resize(out_len);
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
}

// probe_audio reads a file's first 4 KiB, where a plain WAV's data chunk starts (44 bytes in, or a
// few hundred after a LIST/INFO chunk), and 64 KiB when a RIFF header runs past that; it falls
// back to libsndfile on the path when the data chunk starts further in. The 4 KiB first: the
// probe reads every file of the corpus, and 64 KiB was a third of a typical clip's bytes.
constexpr uint64_t kProbeFirstBytes = 4 * 1024;
constexpr uint64_t kProbeBytes = 64 * 1024;
// A compressed file that is neither a WAV nor a native FLAC is probed from memory, read whole, up to
// this size (a 10 s MP3 is ~160 KB; 16 MiB is a quarter of an hour); a larger one is opened by path.
constexpr uint64_t kProbeWholeBytes = 16 * 1024 * 1024;
// load_audio holds a whole file in memory: 2 GiB is hours of audio, far beyond any TTS clip
// (and the frame limit of check_header).
constexpr uint64_t kMaxFileBytes = uint64_t{2} << 30;

// Per-thread buffers, reused from clip to clip so that steady-state decoding allocates nothing.
struct DecodeBuffers {
  FileBytes file;
  std::vector<float> mono;  // before resampling
};

// Decodes path into `mono` at the file's own rate; returns the rate.
int decode_file(const fs::path& path, DecodeBuffers& buffers, std::vector<float>& mono) {
  read_file_start(path, kMaxFileBytes, buffers.file);
  if (buffers.file.file_size > kMaxFileBytes) {
    reject(RejectReason::unreadable_audio, path,
           std::to_string(buffers.file.file_size) + " bytes: larger than any TTS clip (limit " +
               std::to_string(kMaxFileBytes) + ")");
  }
  const std::optional<WavLayout> layout = find_wav_layout(buffers.file.bytes, buffers.file.file_size);
  if (is_plain_pcm16(layout, buffers.file.file_size)) {
    const SF_INFO info = pcm16_info(*layout);
    check_header(path, info);
    decode_pcm16(*layout, buffers.file, mono);
    return info.samplerate;  // integer samples: always finite
  }
  if (is_native_flac(buffers.file)) return decode_flac(path, buffers.file, mono);
  MemoryStream stream{nullptr, 0};
  SF_VIRTUAL_IO io{};
  OpenedAudio opened = open_audio_in_memory(path, buffers.file, stream, io);
  decode_mono(opened, path, mono);
  opened.file.reset();
  check_finite(mono, path);
  return opened.info.samplerate;
}

}  // namespace

AudioInfo probe_audio(const std::filesystem::path& path) {
  thread_local FileBytes start;
  read_file_start(path, kProbeFirstBytes, start);
  std::optional<WavLayout> layout = find_wav_layout(start.bytes, start.file_size);
  if (!layout && start.file_size > start.bytes.size() && start.bytes.size() >= 4 &&
      (std::memcmp(start.bytes.data(), "RIFF", 4) == 0 || std::memcmp(start.bytes.data(), "RIFX", 4) == 0)) {
    read_file_start(path, kProbeBytes, start);
    layout = find_wav_layout(start.bytes, start.file_size);
  }
  SF_INFO header{};
  if (is_plain_pcm16(layout, start.file_size)) {
    header = pcm16_info(*layout);
    check_header(path, header);
  } else if (const std::optional<SF_INFO> flac = flac_streaminfo(start)) {
    header = *flac;  // load_audio decodes it with libFLAC: the same header, the same rejections
    check_header(path, header);
  } else if (start.bytes.size() >= 4 && std::memcmp(start.bytes.data(), "RIFF", 4) != 0 &&
             std::memcmp(start.bytes.data(), "RIFX", 4) != 0 && start.file_size <= kProbeWholeBytes) {
    // MP3, Ogg, Opus (the corpus's other audio): libsndfile parses them from the file held in
    // memory, as load_audio does. On the path it made ~20 small reads and seeks per file (an MP3's
    // length comes from its Xing header or a walk of its frames) and three opens looking for a
    // Mac resource fork; one read of the whole file (tens of KB) is cheaper.
    if (start.file_size > start.bytes.size()) read_file_start(path, kProbeWholeBytes, start);
    MemoryStream stream{nullptr, 0};
    SF_VIRTUAL_IO io{};
    header = open_audio_in_memory(path, start, stream, io).info;
  } else {
    header = open_audio(path, start).info;  // another RIFF, or a file too large to read whole
  }
  AudioInfo info;
  info.frames = header.frames;
  info.sample_rate = header.samplerate;
  info.channels = header.channels;
  info.seconds = static_cast<double>(info.frames) / info.sample_rate;
  info.file_bytes = static_cast<int64_t>(start.file_size);
  info.modified_ns = start.modified_ns;
  if (start.bytes.capacity() > 4 * kProbeBytes) start.bytes = {};  // a large file read whole: not kept
  return info;
}

void load_audio(const std::filesystem::path& path, int target_sample_rate, std::vector<float>& out,
                AudioLoadSeconds* seconds) {
  if (target_sample_rate <= 0) {
    throw ConfigError("features.sample_rate (" + std::to_string(target_sample_rate) +
                      ") must be positive");
  }
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  thread_local DecodeBuffers buffers;
  // At the target rate the samples go straight to `out`; otherwise through buffers.mono.
  const int rate = decode_file(path, buffers, out);
  const auto decoded = Clock::now();
  if (seconds != nullptr) seconds->decode = std::chrono::duration<double>(decoded - started).count();
  // A rare huge file must not pin its size in this thread for good.
  if (buffers.file.bytes.capacity() > (64u << 20)) buffers.file.bytes = {};
  if (rate == target_sample_rate) return;
  std::swap(out, buffers.mono);
  resample(buffers.mono, rate, target_sample_rate, path, out);
  if (seconds != nullptr) seconds->resample = std::chrono::duration<double>(Clock::now() - decoded).count();
}

std::vector<float> load_audio(const std::filesystem::path& path, int target_sample_rate,
                              AudioLoadSeconds* seconds) {
  std::vector<float> out;
  load_audio(path, target_sample_rate, out, seconds);
  return out;
}

}  // namespace sluice::dataset
