// Decode alone, the same files, the same run: libsndfile (what dataset/audio.cpp uses for every
// file but a plain 16-bit WAV) against libFLAC and libmpg123 called directly (the decoders
// libsndfile itself calls) and, when the build found it, FFmpeg's libavcodec (its FLAC and MP3
// decoders have SIMD). No mel, no resampling, no file I/O: every file is read into memory first,
// and each decoder turns those bytes into mono float samples as load_audio would.
//
//   bench_decode DIR [ROUNDS]     (DIR: .flac or .mp3 files, e.g. bench_prep_vs_mel.sh's clips/)
//
// Prints audio-seconds decoded per CPU-second (this thread's CPU time, less sensitive to other
// load than wall time) and per wall second, the best of ROUNDS (default 5) for each decoder, its
// ratio to libsndfile's, and whether its samples equal libsndfile's bit for bit. Numbers only.
#include <FLAC/stream_decoder.h>
#include <mpg123.h>
#include <sndfile.h>
#include <time.h>

#if SLUICE_BENCH_LIBAVCODEC
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
}
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;
using Decoder = std::function<void(const Bytes&, std::vector<float>&)>;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// --- libsndfile from memory, as dataset/audio.cpp's open_audio_in_memory + decode_mono ---------
struct Memory {
  const Bytes* bytes;
  sf_count_t position = 0;
};

// `rate`, when given, receives the file's sample rate.
void decode_sndfile(const Bytes& bytes, std::vector<float>& out, int* rate = nullptr) {
  Memory memory{&bytes};
  SF_VIRTUAL_IO io{};
  io.get_filelen = [](void* user) { return static_cast<sf_count_t>(static_cast<Memory*>(user)->bytes->size()); };
  io.seek = [](sf_count_t offset, int whence, void* user) {
    auto* m = static_cast<Memory*>(user);
    const auto size = static_cast<sf_count_t>(m->bytes->size());
    const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->position : size;
    m->position = std::clamp<sf_count_t>(base + offset, 0, size);
    return m->position;
  };
  io.read = [](void* to, sf_count_t count, void* user) {
    auto* m = static_cast<Memory*>(user);
    const sf_count_t n = std::clamp<sf_count_t>(static_cast<sf_count_t>(m->bytes->size()) - m->position, 0, count);
    std::memcpy(to, m->bytes->data() + m->position, static_cast<size_t>(n));
    m->position += n;
    return n;
  };
  io.write = [](const void*, sf_count_t, void*) { return sf_count_t{0}; };
  io.tell = [](void* user) { return static_cast<Memory*>(user)->position; };
  SF_INFO info{};
  SNDFILE* file = sf_open_virtual(&io, SFM_READ, &info, &memory);
  if (file == nullptr) fail(std::string("libsndfile: ") + sf_strerror(nullptr));
  if (rate != nullptr) *rate = info.samplerate;
  const int channels = info.channels;
  if (channels == 1) {  // straight into `out`, as decode_mono does
    out.resize(static_cast<size_t>(info.frames));
    sf_count_t got = 0;
    while (got < info.frames) {
      const sf_count_t n = sf_readf_float(file, out.data() + got, info.frames - got);
      if (n <= 0) break;
      got += n;
    }
    sf_close(file);
    out.resize(static_cast<size_t>(got));
    return;
  }
  std::vector<float> interleaved(static_cast<size_t>(info.frames * channels));
  sf_count_t got = 0;
  while (got < info.frames) {
    const sf_count_t n = sf_readf_float(file, interleaved.data() + got * channels, info.frames - got);
    if (n <= 0) break;
    got += n;
  }
  sf_close(file);
  out.resize(static_cast<size_t>(got));
  const float scale = 1.0f / static_cast<float>(channels);
  for (size_t i = 0; i < out.size(); ++i) {
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += interleaved[i * channels + c];
    out[i] = channels == 1 ? sum : sum * scale;
  }
}

// --- libFLAC's stream decoder from memory -------------------------------------------------------
struct FlacState {
  const Bytes* bytes;
  size_t position = 0;
  std::vector<float>* out;
};

void decode_flac(const Bytes& bytes, std::vector<float>& out) {
  static thread_local FLAC__StreamDecoder* decoder = FLAC__stream_decoder_new();
  FlacState state{&bytes, 0, &out};
  out.clear();
  auto read = [](const FLAC__StreamDecoder*, FLAC__byte buffer[], size_t* n, void* user) {
    auto* s = static_cast<FlacState*>(user);
    *n = std::min(*n, s->bytes->size() - s->position);
    std::memcpy(buffer, s->bytes->data() + s->position, *n);
    s->position += *n;
    return *n > 0 ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
  };
  // libsndfile's scaling: sample x 1/2^(bits-1) in float, channels summed then x 1/channels.
  auto write = [](const FLAC__StreamDecoder*, const FLAC__Frame* frame, const FLAC__int32* const buffer[],
                  void* user) {
    auto* s = static_cast<FlacState*>(user);
    const unsigned n = frame->header.blocksize, channels = frame->header.channels;
    const float norm = 1.0f / static_cast<float>(1u << (frame->header.bits_per_sample - 1));
    const size_t at = s->out->size();
    s->out->resize(at + n);
    float* to = s->out->data() + at;
    if (channels == 1) {
      for (unsigned i = 0; i < n; ++i) to[i] = static_cast<float>(buffer[0][i]) * norm;
    } else {
      const float scale = 1.0f / static_cast<float>(channels);
      for (unsigned i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (unsigned c = 0; c < channels; ++c) sum += static_cast<float>(buffer[c][i]) * norm;
        to[i] = sum * scale;
      }
    }
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
  };
  auto metadata = [](const FLAC__StreamDecoder*, const FLAC__StreamMetadata* block, void* user) {
    if (block->type == FLAC__METADATA_TYPE_STREAMINFO) {
      static_cast<FlacState*>(user)->out->reserve(block->data.stream_info.total_samples);
    }
  };
  auto error = [](const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus status, void*) {
    std::fprintf(stderr, "libFLAC: %s\n", FLAC__StreamDecoderErrorStatusString[status]);
  };
  if (FLAC__stream_decoder_init_stream(decoder, read, nullptr, nullptr, nullptr, nullptr, write, metadata, error,
                                       &state) != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
    fail("libFLAC: init failed");
  }
  FLAC__stream_decoder_process_until_end_of_stream(decoder);
  FLAC__stream_decoder_finish(decoder);
}

// --- libmpg123 fed from memory, float output (libsndfile's MP3 decoder, called directly) --------
void decode_mpg123(const Bytes& bytes, std::vector<float>& out) {
  static thread_local mpg123_handle* handle = [] {
    mpg123_init();
    int error = 0;
    mpg123_handle* h = mpg123_new(nullptr, &error);
    mpg123_param(h, MPG123_ADD_FLAGS, MPG123_QUIET | MPG123_GAPLESS, 0);
    mpg123_format_none(h);
    for (long rate : {8000L, 11025L, 12000L, 16000L, 22050L, 24000L, 32000L, 44100L, 48000L}) {
      mpg123_format(h, rate, MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
    }
    return h;
  }();
  out.clear();
  mpg123_open_feed(handle);
  mpg123_feed(handle, bytes.data(), bytes.size());
  long rate = 0;
  int channels = 1, encoding = 0;
  while (true) {
    unsigned char* audio = nullptr;
    size_t n_bytes = 0;
    off_t frame = 0;
    const int status = mpg123_decode_frame(handle, &frame, &audio, &n_bytes);
    if (status == MPG123_NEW_FORMAT) {
      mpg123_getformat(handle, &rate, &channels, &encoding);
      continue;
    }
    if (status == MPG123_NEED_MORE || status == MPG123_DONE) break;
    if (status != MPG123_OK) fail(std::string("mpg123: ") + mpg123_strerror(handle));
    const auto* samples = reinterpret_cast<const float*>(audio);
    const size_t n = n_bytes / sizeof(float) / static_cast<size_t>(channels);
    const size_t at = out.size();
    out.resize(at + n);
    for (size_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int c = 0; c < channels; ++c) sum += samples[i * channels + c];
      out[at + i] = channels == 1 ? sum : sum * (1.0f / static_cast<float>(channels));
    }
  }
  mpg123_close(handle);
}

#if SLUICE_BENCH_LIBAVCODEC
// --- FFmpeg: libavformat demuxes from memory, libavcodec decodes ---------------------------------
struct AvMemory {
  const Bytes* bytes;
  size_t position = 0;
};

void decode_libavcodec(const Bytes& bytes, std::vector<float>& out, const char* format_name) {
  out.clear();
  AvMemory memory{&bytes};
  constexpr int kBuffer = 1 << 16;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBuffer));
  AVIOContext* io = avio_alloc_context(
      buffer, kBuffer, 0, &memory,
      [](void* user, uint8_t* to, int n) -> int {
        auto* m = static_cast<AvMemory*>(user);
        const size_t k = std::min<size_t>(static_cast<size_t>(n), m->bytes->size() - m->position);
        if (k == 0) return AVERROR_EOF;
        std::memcpy(to, m->bytes->data() + m->position, k);
        m->position += k;
        return static_cast<int>(k);
      },
      nullptr,
      [](void* user, int64_t offset, int whence) -> int64_t {
        auto* m = static_cast<AvMemory*>(user);
        const auto size = static_cast<int64_t>(m->bytes->size());
        if (whence == AVSEEK_SIZE) return size;
        whence &= ~AVSEEK_FORCE;
        const int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? static_cast<int64_t>(m->position) : size;
        m->position = static_cast<size_t>(std::clamp<int64_t>(base + offset, 0, size));
        return static_cast<int64_t>(m->position);
      });
  AVFormatContext* format = avformat_alloc_context();
  format->pb = io;
  if (avformat_open_input(&format, nullptr, av_find_input_format(format_name), nullptr) < 0) fail("libavformat: open");
  const AVCodecParameters* parameters = format->streams[0]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(parameters->codec_id);
  AVCodecContext* context = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(context, parameters);
  if (avcodec_open2(context, codec, nullptr) < 0) fail("libavcodec: open");
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto drain = [&] {
    while (avcodec_receive_frame(context, frame) == 0) {
      const int n = frame->nb_samples, channels = frame->ch_layout.nb_channels;
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(n));
      float* to = out.data() + at;
      const float scale = 1.0f / static_cast<float>(channels);
      for (int i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (int c = 0; c < channels; ++c) {
          switch (frame->format) {
            case AV_SAMPLE_FMT_S16: sum += reinterpret_cast<const int16_t*>(frame->data[0])[i * channels + c] * (1.0f / 32768.0f); break;
            case AV_SAMPLE_FMT_S32: sum += static_cast<float>(reinterpret_cast<const int32_t*>(frame->data[0])[i * channels + c]) * (1.0f / 2147483648.0f); break;
            case AV_SAMPLE_FMT_FLTP: sum += reinterpret_cast<const float*>(frame->data[c])[i]; break;
            case AV_SAMPLE_FMT_FLT: sum += reinterpret_cast<const float*>(frame->data[0])[i * channels + c]; break;
            default: fail("libavcodec: sample format " + std::to_string(frame->format));
          }
        }
        to[i] = channels == 1 ? sum : sum * scale;
      }
    }
  };
  while (av_read_frame(format, packet) >= 0) {
    avcodec_send_packet(context, packet);
    av_packet_unref(packet);
    drain();
  }
  avcodec_send_packet(context, nullptr);
  drain();
  av_frame_free(&frame);
  av_packet_free(&packet);
  avcodec_free_context(&context);
  avformat_close_input(&format);
  av_freep(&io->buffer);
  avio_context_free(&io);
}
#endif

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_decode DIR [ROUNDS]  (DIR holds .flac or .mp3 files)\n");
    return 2;
  }
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::vector<Bytes> files;
  std::string extension;
  for (const auto& entry : fs::directory_iterator(argv[1])) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".flac" && ext != ".mp3") continue;
    if (!extension.empty() && ext != extension) {
      std::fprintf(stderr, "bench_decode: %s holds both %s and %s files: give one format\n", argv[1],
                   extension.c_str(), ext.c_str());
      return 2;
    }
    extension = ext;
    std::ifstream in(entry.path(), std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (files.empty()) {
    std::fprintf(stderr, "bench_decode: no .flac or .mp3 files in %s\n", argv[1]);
    return 2;
  }
#if SLUICE_BENCH_LIBAVCODEC
  av_log_set_level(AV_LOG_QUIET);
#endif
  std::vector<std::pair<std::string, Decoder>> decoders = {
      {"libsndfile (sluice today)", [](const Bytes& b, std::vector<float>& o) { decode_sndfile(b, o); }}};
  if (extension == ".flac") {
    decoders.emplace_back("libFLAC, called directly", decode_flac);
#if SLUICE_BENCH_LIBAVCODEC
    decoders.emplace_back("libavcodec flac", [](const Bytes& b, std::vector<float>& o) { decode_libavcodec(b, o, "flac"); });
#endif
  } else {
    decoders.emplace_back("libmpg123, called directly", decode_mpg123);
#if SLUICE_BENCH_LIBAVCODEC
    decoders.emplace_back("libavcodec mp3float", [](const Bytes& b, std::vector<float>& o) { decode_libavcodec(b, o, "mp3"); });
#endif
  }

  // libsndfile's samples are the reference every other decoder is compared with.
  std::vector<std::vector<float>> reference(files.size());
  double audio_seconds = 0;
  int rate = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    decode_sndfile(files[i], reference[i], &rate);
    audio_seconds += static_cast<double>(reference[i].size()) / rate;
  }
  std::printf("%zu %s files, %.1f s of audio, best of %d rounds\n", files.size(), extension.c_str(), audio_seconds,
              rounds);
  std::printf("%-28s%16s%16s%10s   %s\n", "decoder", "audio-s/CPU-s", "audio-s/wall-s", "vs first", "samples");
  double first_rate = 0;
  std::vector<float> out;
  for (const auto& [name, decode] : decoders) {
    double best_cpu = 1e30, best_wall = 1e30;
    size_t identical = 0;
    double max_difference = 0;
    for (int round = 0; round < rounds; ++round) {
      const double cpu_start = thread_cpu_seconds();
      const auto wall_start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < files.size(); ++i) {
        decode(files[i], out);
        if (round > 0) continue;
        if (out.size() == reference[i].size() &&
            std::memcmp(out.data(), reference[i].data(), out.size() * sizeof(float)) == 0) {
          ++identical;
        } else {
          for (size_t k = 0; k < std::min(out.size(), reference[i].size()); ++k) {
            max_difference = std::max(max_difference, static_cast<double>(std::fabs(out[k] - reference[i][k])));
          }
        }
      }
      best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
      best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
    }
    const double per_cpu = audio_seconds / best_cpu;
    if (first_rate == 0) first_rate = per_cpu;
    char equality[96];
    std::snprintf(equality, sizeof(equality), "%zu/%zu bit-identical to libsndfile%s", identical, files.size(),
                  identical == files.size() ? "" : (", max |difference| " + std::to_string(max_difference)).c_str());
    std::printf("%-28s%16.0f%16.0f%10.2f   %s\n", name.c_str(), per_cpu, audio_seconds / best_wall,
                per_cpu / first_rate, equality);
  }
#if !SLUICE_BENCH_LIBAVCODEC
  std::printf("libavcodec: not in this build (apt-get install libavcodec-dev libavformat-dev, then reconfigure)\n");
#endif
  return 0;
}
