// `sluice prep` end to end: the real binary, real mpirun ranks, real HDF5 files.
#include <signal.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/interrupt_ranks.h"

#include "cache/cache_reader.h"
#include "cache/shard_reader.h"
#include "dataset/corpus.h"
#include "tests/dataset/corpus_replicas.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

CommandResult run(const std::string& command) { return test::run_command(command); }
fs::path scratch(const std::string& name) { return test::scratch_dir("prep-test", name); }

std::string prep_command(int ranks, const fs::path& corpus, const fs::path& cache,
                         const std::string& extra = "") {
  // --oversubscribe: the tests start more ranks than CI's 2 cores.
  std::string command = ranks > 1 ? std::string(SLUICE_MPIEXEC) + " --oversubscribe -np " +
                                        std::to_string(ranks) + " "
                                  : "";
  return command + SLUICE_BINARY + " prep --corpus " + corpus.string() + " --out " + cache.string() +
         " --set cache.shard_size=16 --set prep.progress_interval_s=0.2 " + extra;
}

std::map<std::string, cache::Sample> samples_by_id(const fs::path& dir) {
  auto reader = cache::CacheReader::open(dir);
  std::map<std::string, cache::Sample> samples;
  for (int64_t i = 0; i < reader.size(); ++i) {
    auto sample = reader.read(i);
    samples.emplace(sample.id, std::move(sample));
  }
  return samples;
}

void expect_same_samples(const fs::path& a, const fs::path& b) {
  const auto left = samples_by_id(a), right = samples_by_id(b);
  ASSERT_EQ(left.size(), right.size());
  for (const auto& [id, sample] : left) {
    auto other = right.find(id);
    ASSERT_NE(other, right.end()) << id;
    EXPECT_EQ(sample.n_frames, other->second.n_frames) << id;
    EXPECT_EQ(sample.mel, other->second.mel) << id;  // bit-identical floats
    EXPECT_EQ(sample.tokens, other->second.tokens) << id;
  }
}

nlohmann::json manifest_of(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  return nlohmann::json::parse(in);
}

// The sample corpus, shared by the tests below: one clean one-process cache made once.
class PrepJob : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);  // CI runs as root
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    reference_ = scratch("reference");
    const CommandResult result = run(prep_command(1, SLUICE_SAMPLE_CORPUS, reference_));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  static fs::path reference_;
};
fs::path PrepJob::reference_;

TEST_F(PrepJob, OneProcessCacheIsCompleteAndVerifies) {
  const auto manifest = manifest_of(reference_);
  EXPECT_EQ(manifest["totals"]["samples"], 120);
  EXPECT_EQ(manifest["totals"]["rejects"], 0);
  const auto samples = samples_by_id(reference_);
  ASSERT_EQ(samples.size(), 120u);
  const auto& first = samples.at("LJS-EN-0001");
  EXPECT_EQ(first.n_mels, 80);
  EXPECT_GT(first.n_frames, 2 * 22050 / 256);  // clips are at least 2 s
  EXPECT_FALSE(first.tokens.empty());
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + reference_.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_TRUE(fs::exists(reference_ / "sluice-prep.yaml"));
  EXPECT_TRUE(fs::exists(reference_ / "rejects.jsonl"));
}

TEST_F(PrepJob, ThreeRanksWriteTheSameSamplesAsOneProcess) {
  const fs::path cache = scratch("three-ranks");
  const CommandResult result = run(prep_command(3, SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(manifest_of(cache)["fingerprint"], manifest_of(reference_)["fingerprint"]);
  expect_same_samples(reference_, cache);
  // Per-bin statistics summed over the shards of all three ranks by rank 0: one per mel bin,
  // over every frame, plausible for log-mels (floor log(1e-5) = -11.5), and the same as one
  // process gets from the same samples.
  const auto statistics = manifest_of(cache)["mel_statistics"];
  ASSERT_TRUE(statistics.is_object()) << manifest_of(cache).dump(2);
  EXPECT_EQ(statistics["frames"], manifest_of(cache)["totals"]["frames"]);
  ASSERT_EQ(statistics["mean"].size(), 80u);
  ASSERT_EQ(statistics["std"].size(), 80u);
  const auto one_process = manifest_of(reference_)["mel_statistics"];
  int spread_bins = 0;
  for (size_t b = 0; b < 80; ++b) {
    const double mean = statistics["mean"][b], stddev = statistics["std"][b];
    EXPECT_GE(mean, -11.6) << "bin " << b;
    EXPECT_LE(mean, 5.0) << "bin " << b;
    EXPECT_GE(stddev, 0.0) << "bin " << b;
    EXPECT_LE(stddev, 10.0) << "bin " << b;
    spread_bins += stddev > 0.1;
    EXPECT_NEAR(mean, one_process["mean"][b].get<double>(), 1e-5 * std::fabs(mean) + 1e-6);
    EXPECT_NEAR(stddev, one_process["std"][b].get<double>(), 1e-5 * stddev + 1e-6);
  }
  EXPECT_GT(spread_bins, 40);  // speech varies in most bands
  const auto reader = cache::CacheReader::open(cache);
  const cache::MelStatistics* read_back = reader.mel_statistics();
  ASSERT_NE(read_back, nullptr);
  EXPECT_EQ(read_back->frames, statistics["frames"].get<int64_t>());
  EXPECT_EQ(read_back->mean.size(), 80u);
  // Every rank wrote shards: the summary table has a row per rank with a non-zero sample count.
  for (const char* rank_row : {"\n0 ", "\n1 ", "\n2 "}) {
    EXPECT_NE(result.output.find(rank_row), std::string::npos) << result.output;
  }
}

TEST_F(PrepJob, RerunKeepsFinishedShardsAndStaleSettingsAreRefused) {
  const fs::path cache = scratch("rerun");
  ASSERT_EQ(run(prep_command(1, SLUICE_SAMPLE_CORPUS, cache)).exit_code, 0);
  const auto shard = cache / "shard-00000.h5";
  const auto written = fs::last_write_time(shard);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  const CommandResult again = run(prep_command(2, SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(fs::last_write_time(shard), written);  // kept, not rewritten

  const CommandResult refused = run(prep_command(1, SLUICE_SAMPLE_CORPUS, cache, "--set features.n_mels=64"));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("features.n_mels"), std::string::npos) << refused.output;
  EXPECT_EQ(manifest_of(cache)["fingerprint"], manifest_of(reference_)["fingerprint"]);

  const CommandResult replaced = run(prep_command(1, SLUICE_SAMPLE_CORPUS, cache, "--set features.n_mels=64 --overwrite"));
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(cache::CacheReader::open(cache).n_mels(), 64);
}

TEST_F(PrepJob, KillNineMidwayThenRerunEqualsACleanRun) {
  const fs::path cache = scratch("killed");
  // Its own process group, so that kill -9 reaches mpirun and every rank at once.
  const pid_t child = ::fork();
  if (child == 0) {
    ::setsid();
    const std::string command = prep_command(2, SLUICE_SAMPLE_CORPUS, cache, "--threads 1") + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the first finished shard, then kill in the middle of the rest.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  bool some_written = false;
  while (!some_written && std::chrono::steady_clock::now() < give_up) {
    for (const auto& entry : fs::directory_iterator(cache)) {
      const auto name = entry.path().filename().string();
      some_written |= name.rfind("shard-", 0) == 0 && name.size() == std::string("shard-00000.h5").size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(some_written);
  ::kill(-child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the ranks' group die too

  EXPECT_FALSE(fs::exists(cache / "manifest.json"));
  // Whatever is at a shard's final name is a complete shard; the rest are temp names.
  std::string fingerprint = manifest_of(reference_)["fingerprint"];
  int complete = 0;
  for (const auto& entry : fs::directory_iterator(cache)) {
    const auto name = entry.path().filename().string();
    if (name.size() == std::string("shard-00000.h5").size() && name.rfind("shard-", 0) == 0) {
      EXPECT_TRUE(cache::is_complete_shard(entry.path(), fingerprint)) << name;
      ++complete;
    }
  }
  EXPECT_GE(complete, 1);

  const CommandResult rerun = run(prep_command(2, SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + cache.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  expect_same_samples(reference_, cache);
  for (const auto& entry : fs::directory_iterator(cache)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

// --- bad input -------------------------------------------------------------------------------

void write_wav(const fs::path& path, const std::vector<float>& samples, int format, int rate = 22050) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | format;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  if (!samples.empty()) sf_writef_float(file, samples.data(), static_cast<sf_count_t>(samples.size()));
  sf_close(file);
}

std::vector<float> tone(double seconds) {
  std::vector<float> samples(static_cast<size_t>(seconds * 22050));
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = 0.3f * std::sin(0.05f * float(i));
  return samples;
}

TEST_F(PrepJob, EveryRejectReasonIsRecordedAndGoodSamplesKept) {
  const fs::path corpus = scratch("bad-corpus");
  fs::create_directories(corpus / "wavs");
  std::string metadata;
  for (const char* good : {"LJS-EN-0001", "LJS-EN-0002", "LJS-FA-0001"}) {
    fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / (std::string(good) + ".wav"),
                  corpus / "wavs" / (std::string(good) + ".wav"));
    metadata += std::string(good) + "|A good clip number 1.|\n";
  }
  write_wav(corpus / "wavs" / "empty.wav", {}, SF_FORMAT_PCM_16);
  std::ofstream(corpus / "wavs" / "garbage.wav") << "this is not audio at all, just text";
  fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / "LJS-EN-0003.wav", corpus / "wavs" / "truncated.wav");
  fs::resize_file(corpus / "wavs" / "truncated.wav", fs::file_size(corpus / "wavs" / "truncated.wav") / 2);
  auto with_nan = tone(2.0);
  with_nan[1000] = std::nanf("");
  write_wav(corpus / "wavs" / "nan.wav", with_nan, SF_FORMAT_FLOAT);
  write_wav(corpus / "wavs" / "short.wav", tone(0.2), SF_FORMAT_PCM_16);
  write_wav(corpus / "wavs" / "long.wav", tone(25.0), SF_FORMAT_PCM_16);
  write_wav(corpus / "wavs" / "silent-text.wav", tone(2.0), SF_FORMAT_PCM_16);
  write_wav(corpus / "wavs" / "badutf8.wav", tone(2.0), SF_FORMAT_PCM_16);
  metadata +=
      "missing|no such file|\n"
      "empty|an empty file|\n"
      "garbage|not audio|\n"
      "truncated|cut in half|\n"
      "nan|not finite|\n"
      "short|too short|\n"
      "long|too long|\n"
      "silent-text| |\n"
      "a row without the separator\n"
      "LJS-EN-0001|the same id again|\n"
      "../../escape|leaves the root|\n"
      "badutf8|\xff\xfe broken|\n";
  std::ofstream(corpus / "metadata.csv") << metadata;

  const fs::path cache = scratch("bad-cache");
  const CommandResult result = run(prep_command(2, corpus, cache, "--set prep.max_reject_fraction=1"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(samples_by_id(cache).size(), 3u);

  std::map<std::string, std::string> reason_of;  // source line -> reason
  std::ifstream rejects(cache / "rejects.jsonl");
  for (std::string line; std::getline(rejects, line);) {
    const auto reject = nlohmann::json::parse(line);
    reason_of[reject["source"]] = reject["reason"];
    EXPECT_FALSE(reject["detail"].get<std::string>().empty()) << line;
  }
  const std::map<std::string, std::string> expected = {
      {"metadata.csv:4", "missing_audio"},     {"metadata.csv:5", "empty_audio"},
      {"metadata.csv:6", "unreadable_audio"},  {"metadata.csv:7", "truncated_audio"},
      {"metadata.csv:8", "non_finite_audio"},  {"metadata.csv:9", "too_short"},
      {"metadata.csv:10", "too_long"},         {"metadata.csv:11", "empty_text"},
      {"metadata.csv:12", "malformed_row"},    {"metadata.csv:13", "duplicate_id"},
      {"metadata.csv:14", "path_escapes_root"}, {"metadata.csv:15", "invalid_text"}};
  EXPECT_EQ(reason_of, expected);
  EXPECT_EQ(manifest_of(cache)["totals"]["rejects"], 12);
  EXPECT_NE(result.output.find("rejects by reason"), std::string::npos) << result.output;

  // The same corpus under the default limit (5%) fails, names the limit, and writes no manifest.
  const fs::path strict = scratch("bad-cache-strict");
  const CommandResult failed = run(prep_command(1, corpus, strict));
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  EXPECT_NE(failed.output.find("prep.max_reject_fraction"), std::string::npos) << failed.output;
  EXPECT_FALSE(fs::exists(strict / "manifest.json"));
  EXPECT_TRUE(fs::exists(strict / "rejects.jsonl"));
}

TEST_F(PrepJob, JsonlManifestGivesTheSameSamplesAsLjspeech) {
  const fs::path cache = scratch("jsonl");
  const CommandResult result = run(prep_command(1, fs::path(SLUICE_SAMPLE_CORPUS) / "manifest.jsonl", cache));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto from_jsonl = samples_by_id(cache);
  const auto from_ljspeech = samples_by_id(reference_);
  ASSERT_EQ(from_jsonl.size(), from_ljspeech.size());
  for (const auto& [id, sample] : from_ljspeech) EXPECT_EQ(from_jsonl.at(id).mel, sample.mel) << id;
  EXPECT_EQ(manifest_of(cache)["languages"], nlohmann::json({"en", "fa"}));
}

// --- corpora as downloaded -------------------------------------------------------------------

// The file's samples at its own rate, mono (every replica clip is mono).
std::pair<std::vector<float>, int> decode_native(const fs::path& file) {
  SF_INFO info{};
  SNDFILE* in = sf_open(file.c_str(), SFM_READ, &info);
  EXPECT_NE(in, nullptr) << file << ": " << sf_strerror(nullptr);
  if (in == nullptr) return {{}, 0};
  std::vector<float> samples(static_cast<size_t>(info.frames));
  samples.resize(static_cast<size_t>(sf_readf_float(in, samples.data(), info.frames)));
  sf_close(in);
  return {samples, info.samplerate};
}

// Prep of `corpus` keeps the rows the replica expects, with their speakers and languages, records
// the others with their reason and text, and writes the mels that the same audio gives when it is
// stored as WAV in an LJSpeech folder.
void expect_prep_equals_wav(const std::string& name, const fs::path& corpus,
                            const std::vector<test::ExpectedRow>& rows) {
  SCOPED_TRACE(name);
  const fs::path cache = scratch(name + "-cache");
  const std::string loose = "--set prep.max_reject_fraction=1";
  const CommandResult result = run(prep_command(1, corpus, cache, loose));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("recognised by"), std::string::npos) << result.output;
  const auto samples = samples_by_id(cache);
  std::set<std::string> kept, speakers, languages;
  size_t rejected = 0;
  for (const auto& row : rows) {
    if (!row.reject.empty()) {
      ++rejected;
      continue;
    }
    kept.insert(row.id);
    speakers.insert(row.speaker.empty() ? "default" : row.speaker);
    languages.insert(row.language.empty() ? "en" : row.language);
  }
  std::set<std::string> cached;
  for (const auto& [id, sample] : samples) cached.insert(id);
  EXPECT_EQ(cached, kept);
  const auto manifest = manifest_of(cache);
  EXPECT_EQ(manifest["speakers"].get<std::set<std::string>>(), speakers);
  EXPECT_EQ(manifest["languages"].get<std::set<std::string>>(), languages);
  EXPECT_EQ(manifest["totals"]["rejects"], rejected);
  const CommandResult inspect = run(std::string(SLUICE_BINARY) + " cache inspect " + cache.string());
  EXPECT_NE(inspect.output.find("corpus " + name + ": " + std::to_string(languages.size()) + " language(s), " +
                                std::to_string(speakers.size()) + " speaker(s)"),
            std::string::npos)
      << inspect.output;
  std::ifstream rejects(cache / "rejects.jsonl");
  for (std::string line; std::getline(rejects, line);) {
    const auto reject = nlohmann::json::parse(line);
    EXPECT_FALSE(reject["text"].get<std::string>().empty() && reject["reason"] != "missing_text") << line;
    EXPECT_LE(reject["text"].get<std::string>().size(), 203u) << line;  // 200 bytes + "..."
  }

  // The same audio as WAV: decoded at its own rate, stored as float WAV, same text.
  const fs::path wav_corpus = scratch(name + "-as-wav");
  fs::create_directories(wav_corpus / "wavs");
  std::ofstream metadata(wav_corpus / "metadata.csv");
  for (const auto& item : dataset::read_corpus(corpus, dataset::CorpusOptions{}).items) {
    if (item.reject) continue;
    const auto [audio, rate] = decode_native(item.audio);
    test::write_samples(wav_corpus / "wavs" / (item.id + ".wav"), SF_FORMAT_WAV | SF_FORMAT_FLOAT, audio, rate);
    metadata << item.id << "|" << item.text << "|\n";
  }
  metadata.close();
  const fs::path wav_cache = scratch(name + "-as-wav-cache");
  const CommandResult wav_result = run(prep_command(1, wav_corpus, wav_cache, loose));
  ASSERT_EQ(wav_result.exit_code, 0) << wav_result.output;
  const auto from_wav = samples_by_id(wav_cache);
  ASSERT_EQ(from_wav.size(), samples.size());
  for (const auto& [id, sample] : samples) {
    EXPECT_EQ(sample.mel, from_wav.at(id).mel) << id;  // bit-identical floats
    EXPECT_GT(sample.n_frames, 0) << id;
  }
}

TEST(PrepCorpora, EachDownloadedLayoutGivesTheMelsOfTheSameAudioAsWav) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const fs::path ljspeech = scratch("ljspeech-any-audio");
  expect_prep_equals_wav("ljspeech", ljspeech, test::make_ljspeech_replica(ljspeech));
  const fs::path libritts = scratch("libritts");
  expect_prep_equals_wav("libritts", libritts, test::make_libritts_replica(libritts));
  const fs::path vctk = scratch("vctk");
  expect_prep_equals_wav("vctk", vctk, test::make_vctk_replica(vctk));
  const fs::path commonvoice = scratch("commonvoice") / "fa";
  expect_prep_equals_wav("commonvoice", commonvoice, test::make_commonvoice_replica(commonvoice));
}

// --- the listing read once --------------------------------------------------------------------

// The sample corpus in VCTK's layout, where the listing is a file per utterance:
// wav48_silence_trimmed/pNNN/pNNN_MMM_mic1.wav and txt/pNNN/pNNN_MMM.txt, ten utterances a speaker.
// Returns the number of transcripts.
int make_vctk_copy_of_the_sample_corpus(const fs::path& corpus) {
  std::ifstream metadata(fs::path(SLUICE_SAMPLE_CORPUS) / "metadata.csv");
  int row = 0;
  for (std::string line; std::getline(metadata, line); ++row) {
    const std::string id = line.substr(0, line.find('|'));
    const std::string rest = line.substr(line.find('|') + 1);
    const std::string text = rest.substr(0, rest.find('|'));
    const std::string speaker = "p" + std::to_string(100 + row / 10);
    char utterance[8];
    std::snprintf(utterance, sizeof(utterance), "%03d", row % 10 + 1);
    const std::string name = speaker + "_" + utterance;
    fs::create_directories(corpus / "wav48_silence_trimmed" / speaker);
    fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / (id + ".wav"),
                  corpus / "wav48_silence_trimmed" / speaker / (name + "_mic1.wav"));
    test::write_text(corpus / "txt" / speaker / (name + ".txt"), text + "\n");
  }
  return row;
}

// Lines of an strace log that name a path under `folder` (the calls that touch it).
int calls_under(const fs::path& trace, const fs::path& folder) {
  std::ifstream in(trace);
  int calls = 0;
  const std::string quoted = "\"" + folder.string();
  for (std::string line; std::getline(in, line);) calls += line.find(quoted) != std::string::npos;
  return calls;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// VCTK's listing is 44k transcript files: read by every rank, 64 ranks on a shared file system made
// 64 times its metadata calls. Rank 0 reads it and the others take it from rank 0
// (runtime/prep/listing_share.h): under strace, ranks 1 and 2 touch no transcript, rank 0 touches
// them as one rank did before, and the cache is the one a single rank writes.
TEST_F(PrepJob, OneRankReadsAManyFileListingForAll) {
  ASSERT_EQ(run("strace -V").exit_code, 0) << "strace is needed (scripts/install-deps.sh installs it)";
  const fs::path corpus = scratch("vctk-copy");
  const int transcripts = make_vctk_copy_of_the_sample_corpus(corpus);
  ASSERT_EQ(transcripts, 120);
  const std::string loose = "--set prep.max_reject_fraction=1";

  const fs::path one_rank = scratch("vctk-one-rank");
  const CommandResult single = run(prep_command(1, corpus, one_rank, loose));
  ASSERT_EQ(single.exit_code, 0) << single.output;

  // Each rank under its own strace, its log named by its rank.
  const fs::path traces = scratch("vctk-traces");
  const fs::path three_ranks = scratch("vctk-three-ranks");
  const std::string calls = "openat,open,stat,lstat,newfstatat,statx,access,faccessat,faccessat2,getdents64,readlink";
  const std::string command = std::string(SLUICE_MPIEXEC) + " --oversubscribe -np 3 sh -c 'exec strace -f -qq -e trace=" +
                              calls + " -o " + traces.string() + "/rank-$OMPI_COMM_WORLD_RANK.trace " + SLUICE_BINARY +
                              " prep --corpus " + corpus.string() + " --out " + three_ranks.string() +
                              " --set cache.shard_size=16 --set prep.progress_interval_s=0.2 " + loose + "'";
  const CommandResult shared = run(command);
  ASSERT_EQ(shared.exit_code, 0) << shared.output;

  std::vector<int> transcript_calls;
  for (int rank = 0; rank < 3; ++rank) {
    const fs::path trace = traces / ("rank-" + std::to_string(rank) + ".trace");
    ASSERT_TRUE(fs::exists(trace)) << trace;
    transcript_calls.push_back(calls_under(trace, corpus / "txt"));
  }
  std::cout << "[ metrics  ] transcript (txt/) calls per rank: " << transcript_calls[0] << " " << transcript_calls[1]
            << " " << transcript_calls[2] << "\n";
  EXPECT_GE(transcript_calls[0], transcripts);  // an open per transcript at least, all on rank 0
  EXPECT_EQ(transcript_calls[1], 0);
  EXPECT_EQ(transcript_calls[2], 0);
  EXPECT_NE(shared.output.find("corpus listing: 120 rows"), std::string::npos) << shared.output;

  // The same cache as one rank's: fingerprint, samples, rejects, and it verifies.
  EXPECT_EQ(manifest_of(three_ranks)["fingerprint"], manifest_of(one_rank)["fingerprint"]);
  EXPECT_EQ(manifest_of(three_ranks)["totals"], manifest_of(one_rank)["totals"]);
  EXPECT_EQ(manifest_of(three_ranks)["speakers"], manifest_of(one_rank)["speakers"]);
  expect_same_samples(one_rank, three_ranks);
  EXPECT_EQ(read_text(three_ranks / "rejects.jsonl"), read_text(one_rank / "rejects.jsonl"));
  EXPECT_EQ(samples_by_id(three_ranks).size() + manifest_of(one_rank)["totals"]["rejects"].get<size_t>(), 120u);
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + three_ranks.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

// Three clips of the sample corpus in an LJSpeech folder whose metadata.csv is a FIFO: rank 0's
// listing blocks in its open until someone writes the rows. Returns the rows to write.
std::string make_corpus_with_a_fifo_listing(const fs::path& corpus) {
  fs::create_directories(corpus / "wavs");
  std::string rows;
  for (const char* id : {"LJS-EN-0001", "LJS-EN-0002", "LJS-FA-0001"}) {
    fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / (std::string(id) + ".wav"),
                  corpus / "wavs" / (std::string(id) + ".wav"));
    rows += std::string(id) + "|A clip.|\n";
  }
  EXPECT_EQ(::mkfifo((corpus / "metadata.csv").c_str(), 0600), 0);
  return rows;
}

// Rank 0 reads the listing alone; the others wait for it with the runtime.timeout_s deadline, and
// its keepalives hold them while it still reads: a listing slower than the deadline (here three
// times it, on a file system that does not answer) is waited for, not a failure.
TEST_F(PrepJob, RanksWaitForASlowListingPastTheDeadline) {
  const fs::path corpus = scratch("fifo-listing-slow");
  const std::string rows = make_corpus_with_a_fifo_listing(corpus);
  const fs::path rows_file = scratch("fifo-rows") / "metadata.csv";
  std::ofstream(rows_file) << rows;
  const std::string writer = "{ sleep 12; cat " + rows_file.string() + " > " + (corpus / "metadata.csv").string() + "; } & ";
  const fs::path cache = scratch("fifo-listing-slow-cache");
  const CommandResult result = run(writer + prep_command(3, corpus, cache, "--set runtime.timeout_s=4"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("still reading the corpus listing"), std::string::npos) << result.output;
  EXPECT_EQ(samples_by_id(cache).size(), 3u);
}

// A rank 0 stopped from outside while it reads the listing is named by the ranks waiting for it,
// within about the deadline: not a hang.
TEST_F(PrepJob, AStoppedRankZeroIsNamedByTheRanksWaitingForItsListing) {
  const fs::path dir = scratch("fifo-listing-stopped");
  const fs::path corpus = dir / "corpus";
  make_corpus_with_a_fifo_listing(corpus);
  const std::string command = prep_command(3, corpus, dir / "cache", "--set runtime.timeout_s=4");
  // Once rank 0 says it still reads (MPI has started on every rank by then), it is stopped for good.
  const auto stopped = test::interrupt_ranks(command, dir, SIGSTOP, {0}, "still reading the corpus listing");
  ASSERT_GE(stopped.seconds, 0) << "rank 0 was never found to stop:\n" << stopped.output;
  EXPECT_LT(stopped.seconds, 30) << "the job did not end soon after the 4 s deadline:\n" << stopped.output;
  EXPECT_FALSE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 0) << stopped.output;
  EXPECT_NE(stopped.output.find("rank 0 (host"), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("reads the corpus listing for every rank, and has sent neither the corpus listing "
                                "nor a sign that it is still reading"),
            std::string::npos)
      << stopped.output;
}

// Occurrences of `text` in `output`.
int occurrences(const std::string& output, const std::string& text) {
  int found = 0;
  for (size_t at = output.find(text); at != std::string::npos; at = output.find(text, at + 1)) ++found;
  return found;
}

// An error of the listing is rank 0's alone now; the ranks that did not read fail with its message
// and code: said once, ended alike, on one rank and on three.
TEST_F(PrepJob, ABadCorpusFailsAlikeOnOneAndThreeRanks) {
  const fs::path corpora = scratch("bad-corpora");
  const fs::path missing = corpora / "no-such-corpus";
  const fs::path bad_header = corpora / "cv" / "fa";
  fs::create_directories(bad_header / "clips");
  std::ofstream(bad_header / "validated.tsv") << "client_id\tfile\ttranscript\nc1\ta.mp3\thello\n";
  const fs::path empty = corpora / "empty";
  fs::create_directories(empty / "wavs");
  std::ofstream(empty / "metadata.csv") << "";
  struct Case {
    fs::path corpus;
    std::string extra;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {missing, "", 1, "data error: corpus " + missing.string() + " does not exist"},
      {bad_header, "", 1, "data error: " + (bad_header / "validated.tsv").string() + ":1: the header has no `path` and"},
      {empty, "", 1, "data error: the corpus " + (empty / "metadata.csv").string() + " (ljspeech) has no samples"},
      {SLUICE_SAMPLE_CORPUS, "--set corpus.format=vctk", 1,
       "data error: corpus " + fs::weakly_canonical(SLUICE_SAMPLE_CORPUS).string() + " is not a VCTK folder"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.message);
    for (int ranks : {1, 3}) {
      SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
      const CommandResult result = run(prep_command(ranks, bad.corpus, scratch("bad-corpus-cache"), bad.extra));
      EXPECT_EQ(result.exit_code, bad.exit_code) << result.output;
      EXPECT_EQ(occurrences(result.output, bad.message), 1) << result.output;
      EXPECT_EQ(result.output.find("MPI_ABORT"), std::string::npos) << result.output;  // ended, not aborted
    }
  }
}

TEST(PrepCommand, UnknownConfigKeyIsAUsageError) {
  const CommandResult result = run(std::string(SLUICE_BINARY) + " prep --set features.n_mel=3");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("did you mean 'features.n_mels'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace sluice
