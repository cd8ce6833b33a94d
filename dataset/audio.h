#pragma once
// Audio decoding for the prep job: any file libsndfile reads (WAV int/float, FLAC, OGG, ...),
// downmixed to mono and resampled to the feature rate.
//
// Every failure that concerns one input file throws SampleRejected (dataset/reject.h) with one of
// missing_audio, unreadable_audio, empty_audio, truncated_audio, non_finite_audio, and a detail
// that names the file; the prep job records it in rejects.jsonl and carries on with the next file.
//
// Both functions are thread-safe: they share no state (their reusable buffers are per thread), so
// prep workers call them concurrently.
//
// How a file is read: with one open + fstat + read, into a per-thread buffer. A plain 16-bit PCM
// WAV (little-endian RIFF, the LJSpeech/LibriTTS case) is then parsed and converted here, and a
// native FLAC file (VCTK, LJSpeech as FLAC) is decoded by libFLAC directly, both with the samples
// libsndfile would give bit for bit; every other file is decoded by libsndfile from that buffer
// (sf_open_virtual), so no format pays for system calls per header field or per block.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "dataset/reject.h"

namespace sluice::dataset {

struct AudioInfo {
  int64_t frames = 0;  // samples per channel that are actually present in the file
  int sample_rate = 0;
  int channels = 0;
  double seconds = 0.0;  // frames / sample_rate, before any resampling
  // The file's size and modification time as probe_audio's open saw them (prep's fingerprint
  // inputs): one stat fewer per file, which on Lustre or NFS is a round trip to a metadata server.
  int64_t file_bytes = 0;
  int64_t modified_ns = 0;
};

// Reads the header only (plus, for WAV, the chunk table to detect truncation), so it is cheap
// enough to call for every file of a corpus to balance work by duration: a plain 16-bit WAV costs
// one read of its first 4 KiB (64 KiB when its header is longer), a native FLAC file one read of
// its first 4 KiB (its STREAMINFO); other formats are opened by libsndfile on the path (an Ogg or
// MP3 length may need the file's end). Rejects the same files as load_audio except
// non_finite_audio, which needs the samples (and a FLAC stream cut short, which only decoding sees).
AudioInfo probe_audio(const std::filesystem::path& path);

// Decodes the whole file to mono float32. Integer formats map to [-1, 1) (libsndfile's scaling);
// float files pass through unscaled, so a float file with samples beyond +-1 keeps them, and so
// can the resampler's overshoot near full scale: callers that need a hard bound clip themselves.
// Channels are averaged. When the file's rate differs from target_sample_rate the signal is
// resampled with libsoxr (SOXR_HQ: 20-bit precision, linear phase) to
// round(frames * target / rate) samples; at the same rate the samples are exactly libsndfile's.
//
// Truncation: libsndfile silently shrinks a WAV's frame count to what is on disk, so WAV/WAVEX
// files are checked against their data-chunk size. Streaming writers that cannot seek back
// (espeak-ng --stdout, sox to a pipe, ffmpeg) leave a placeholder size (0, >= 0x7ffff000); such
// files are accepted with the samples present. Other formats are truncated when fewer frames
// decode than the header announces (a FLAC cut short), or when the length is unknown (an Ogg
// file missing its last page).
//
// `seconds`, when given, receives the time spent decoding (open, read, downmix, checks) and
// resampling, for the timing spans of `sluice prep`.
struct AudioLoadSeconds {
  double decode = 0;
  double resample = 0;
};
std::vector<float> load_audio(const std::filesystem::path& path, int target_sample_rate,
                              AudioLoadSeconds* seconds = nullptr);
// The same into `out`, whose capacity is reused: a prep worker passes the same vector for every
// clip and so allocates nothing per clip in steady state. On a rejection `out` holds nothing useful.
void load_audio(const std::filesystem::path& path, int target_sample_rate, std::vector<float>& out,
                AudioLoadSeconds* seconds = nullptr);

}  // namespace sluice::dataset
