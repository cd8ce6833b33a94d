#pragma once
// Small replicas of downloaded corpora in their real layout (file names, audio formats, TSV
// quoting, BOMs, CRLF line ends), made by the tests with libsndfile. Each replica returns the rows
// a reader must list, in order, so a test can assert them row by row.
//
// Used by tests/dataset/test_corpus.cpp (the readers, and mels of each format against WAV).
#include <sndfile.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::test {

namespace fs = std::filesystem;

struct ExpectedRow {
  std::string id;
  std::string speaker;
  std::string language;
  std::string text;
  std::string reject;  // "" = kept; else the reject reason's name
  fs::path audio;      // relative to the corpus root; "" when not checked
};

// A deterministic clip of `seconds`: two tones whose pitch depends on `seed`, below full scale so
// 16-bit and lossy encoders do not clip.
inline std::vector<float> replica_tone(int seed, double seconds, int rate) {
  std::vector<float> samples(static_cast<size_t>(seconds * rate));
  const double two_pi = 2.0 * std::acos(-1.0);
  for (size_t i = 0; i < samples.size(); ++i) {
    const double t = static_cast<double>(i) / rate;
    samples[i] = static_cast<float>(0.3 * std::sin(two_pi * (180.0 + 20.0 * seed) * t) +
                                    0.1 * std::sin(two_pi * (1100.0 + 35.0 * seed) * t));
  }
  return samples;
}

// The libsndfile format of a file name's extension, as the corpus would store it.
inline int replica_format(const fs::path& file) {
  const std::string extension = file.extension().string();
  if (extension == ".wav") return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  if (extension == ".flac") return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  if (extension == ".ogg") return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
  if (extension == ".opus") return SF_FORMAT_OGG | SF_FORMAT_OPUS;
  if (extension == ".mp3") return SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
  throw std::invalid_argument("no replica format for " + file.string());
}

inline void write_samples(const fs::path& file, int format, const std::vector<float>& samples, int rate) {
  fs::create_directories(file.parent_path());
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = format;
  SNDFILE* out = sf_open(file.c_str(), SFM_WRITE, &info);
  if (out == nullptr) throw std::runtime_error(file.string() + ": " + sf_strerror(nullptr));
  const auto count = static_cast<sf_count_t>(samples.size());
  const sf_count_t written = sf_write_float(out, samples.data(), count);
  sf_close(out);
  if (written != count) throw std::runtime_error(file.string() + ": short write");
}

inline void write_clip(const fs::path& file, int seed, int rate = 22050) {
  write_samples(file, replica_format(file), replica_tone(seed, 1.0 + 0.1 * seed, rate), rate);
}

inline void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

const std::string kBom = "\xEF\xBB\xBF";

// LJSpeech with every supported audio format, a BOM, CRLF rows, an id stored twice (.wav and
// .flac), a malformed row and an id without audio.
inline std::vector<ExpectedRow> make_ljspeech_replica(const fs::path& root) {
  write_text(root / "metadata.csv",
             kBom + "LJ001-0001|Printing, in the only sense|Printing, in the only sense\r\n"
                    "LJ001-0002|In being comparatively modern.|\r\n"
                    "LJ001-0003|For although the Chinese took|For although the Chinese took\r\n"
                    "LJ001-0004|produced the block books,|produced the block books,\r\n"
                    "LJ001-0005|the invention of movable metal letters|the invention of movable metal letters\r\n"
                    "this row has no bars and a very long text " + std::string(300, 'x') + "\r\n"
                    "LJ001-0006|no audio for this one|no audio for this one\r\n");
  write_clip(root / "wavs" / "LJ001-0001.flac", 1);
  write_clip(root / "wavs" / "LJ001-0002.ogg", 2);
  write_clip(root / "wavs" / "LJ001-0003.mp3", 3);
  write_clip(root / "wavs" / "LJ001-0004.wav", 4);
  write_clip(root / "wavs" / "LJ001-0004.flac", 5);  // same id: the .wav is taken
  write_clip(root / "wavs" / "LJ001-0005.opus", 6, 48000);
  return {
      {"LJ001-0001", "", "", "Printing, in the only sense", "", "wavs/LJ001-0001.flac"},
      {"LJ001-0002", "", "", "In being comparatively modern.", "", "wavs/LJ001-0002.ogg"},
      {"LJ001-0003", "", "", "For although the Chinese took", "", "wavs/LJ001-0003.mp3"},
      {"LJ001-0004", "", "", "produced the block books,", "", "wavs/LJ001-0004.wav"},
      {"LJ001-0005", "", "", "the invention of movable metal letters", "", "wavs/LJ001-0005.opus"},
      {"", "", "", "this row has no bars and a very long text " + std::string(300, 'x'), "malformed_row", ""},
      {"LJ001-0006", "", "", "no audio for this one", "missing_audio", "wavs/LJ001-0006.wav"},
  };
}

// LibriTTS(-R): one chapter with per-utterance .normalized.txt/.original.txt (one with a BOM and
// CRLF), one with a .trans.tsv, and an utterance without any transcript.
inline std::vector<ExpectedRow> make_libritts_replica(const fs::path& root) {
  const fs::path a = root / "train-clean-100" / "103" / "1240";
  write_clip(a / "103_1240_000000_000000.wav", 1, 24000);
  write_text(a / "103_1240_000000_000000.normalized.txt", "Chapter one Missus Rachel Lynde is surprised.");
  write_text(a / "103_1240_000000_000000.original.txt", "Chapter 1 Mrs. Rachel Lynde is surprised.");
  write_clip(a / "103_1240_000001_000000.wav", 2, 24000);
  write_text(a / "103_1240_000001_000000.normalized.txt", kBom + "Missus Rachel Lynde lived\r\n");
  write_text(a / "103_1240_000001_000000.original.txt", kBom + "Mrs. Rachel Lynde lived\r\n");
  write_clip(a / "103_1240_000002_000000.wav", 3, 24000);  // no transcript
  const fs::path b = root / "train-clean-100" / "1034" / "121119";
  write_clip(b / "1034_121119_000001_000000.wav", 4, 24000);
  write_clip(b / "1034_121119_000002_000000.wav", 5, 24000);
  write_text(b / "1034_121119.trans.tsv",
             "1034_121119_000001_000000\tThe 3 boys\tThe three boys\r\n"
             "1034_121119_000002_000000\t\"Quoted,\" said he\t\"Quoted,\" said he\r\n");
  write_text(b / "1034_121119.book.tsv", "not\ta\ttranscript\n");
  return {
      {"103_1240_000000_000000", "103", "en", "Chapter one Missus Rachel Lynde is surprised.", "",
       "train-clean-100/103/1240/103_1240_000000_000000.wav"},
      {"103_1240_000001_000000", "103", "en", "Missus Rachel Lynde lived", "", ""},
      {"103_1240_000002_000000", "103", "en", "", "missing_text", ""},
      {"1034_121119_000001_000000", "1034", "en", "The three boys", "", ""},
      {"1034_121119_000002_000000", "1034", "en", "\"Quoted,\" said he", "", ""},
  };
}

// VCTK 0.92: two mics per utterance, 48 kHz FLAC; an utterance without transcript, a transcript
// without audio, and a speaker (p315) with no transcripts at all.
inline std::vector<ExpectedRow> make_vctk_replica(const fs::path& root) {
  const fs::path wav = root / "wav48_silence_trimmed";
  write_clip(wav / "p225" / "p225_001_mic1.flac", 1, 48000);
  write_clip(wav / "p225" / "p225_001_mic2.flac", 2, 48000);
  write_clip(wav / "p225" / "p225_002_mic1.flac", 3, 48000);
  write_clip(wav / "p225" / "p225_002_mic2.flac", 4, 48000);
  write_text(root / "txt" / "p225" / "p225_001.txt", "Please call Stella.\n");
  write_text(root / "txt" / "p225" / "p225_002.txt", "Ask her to bring these things with her from the store.\r\n");
  write_clip(wav / "p226" / "p226_001_mic1.flac", 5, 48000);
  write_clip(wav / "p226" / "p226_001_mic2.flac", 6, 48000);
  write_text(root / "txt" / "p226" / "p226_001.txt", "Six spoons of fresh snow peas.\n");
  write_text(root / "txt" / "p226" / "p226_003.txt", "A transcript without audio.\n");
  write_clip(wav / "p315" / "p315_001_mic1.flac", 7, 48000);
  write_text(root / "README.txt", "CSTR VCTK Corpus replica\n");
  return {
      {"p225_001", "p225", "en", "Please call Stella.", "", "wav48_silence_trimmed/p225/p225_001_mic1.flac"},
      {"p225_002", "p225", "en", "Ask her to bring these things with her from the store.", "", ""},
      {"p226_001", "p226", "en", "Six spoons of fresh snow peas.", "", ""},
      {"p226_003", "p226", "en", "A transcript without audio.", "missing_audio", ""},
      {"p315_001", "p315", "en", "", "missing_text", ""},
  };
}

// Common Voice (Persian): validated.tsv of a recent release (sentence_id, locale, votes), clips
// as MP3, a CSV-quoted sentence, a sentence with a stray quote, Persian typed with Arabic yeh and
// kaf, and a row with a missing field.
inline std::vector<ExpectedRow> make_commonvoice_replica(const fs::path& root) {
  const std::string header =
      "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\t"
      "accents\tvariant\tlocale\tsegment\n";
  const std::string speaker_a(64, 'a'), speaker_b(64, 'b');
  write_text(root / "validated.tsv",
             header +
                 speaker_a + "\tcommon_voice_fa_19255379.mp3\t1f0e\tمی‌خواهم به خانه بروم.\t\t2\t0\tthirties\tmale_masculine\t\t\tfa\t\n" +
                 speaker_b + "\tcommon_voice_fa_19255380.mp3\t1f0f\t\"او گفت \"\"سلام\"\"\"\t\t3\t1\t\t\t\t\tfa\t\n" +
                 speaker_a + "\tcommon_voice_fa_19255381.mp3\t1f10\tقطار تهران به مشهد ميرود\t\t2\t0\t\t\t\t\tfa\t\n" +
                 speaker_b + "\tcommon_voice_fa_19255382.mp3\t1f11\t\"کتاب\" را خواندم\t\t2\t0\t\t\t\t\tfa\t\n" +
                 speaker_b + "\tcommon_voice_fa_19255383.mp3\t1f12\tیک ستون کم است\n");
  write_clip(root / "clips" / "common_voice_fa_19255379.mp3", 1, 48000);
  write_clip(root / "clips" / "common_voice_fa_19255380.mp3", 2, 48000);
  write_clip(root / "clips" / "common_voice_fa_19255381.mp3", 3, 48000);
  write_clip(root / "clips" / "common_voice_fa_19255382.mp3", 4, 48000);
  write_text(root / "train.tsv", header);
  return {
      {"common_voice_fa_19255379", speaker_a, "fa", "می‌خواهم به خانه بروم.", "", "clips/common_voice_fa_19255379.mp3"},
      {"common_voice_fa_19255380", speaker_b, "fa", "او گفت \"سلام\"", "", ""},
      {"common_voice_fa_19255381", speaker_a, "fa", "قطار تهران به مشهد ميرود", "", ""},
      {"common_voice_fa_19255382", speaker_b, "fa", "\"کتاب\" را خواندم", "", ""},
      {"", "", "", speaker_b + "\tcommon_voice_fa_19255383.mp3\t1f12\tیک ستون کم است", "malformed_row", ""},
  };
}

}  // namespace sluice::test
