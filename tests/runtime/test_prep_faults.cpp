// Faults from outside the process, on the prep/cache side (issue 17 items 6-8): a disk that fills
// while shards or the index are written, a clip whose samples are huge, bytes flipped in a finished
// shard, an empty corpus, a missing shard under `sluice doctor`, two preps into one directory, and a
// shard truncated under `sluice train`. Every fault is made by the test (a small tmpfs, files it
// writes or damages, processes it starts) against the real `sluice` binary.
#include <fcntl.h>
#include <signal.h>
#include <sndfile.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cache/cache_verifier.h"
#include "cache/shard_reader.h"
#include "tests/support/command.h"
#include "tests/support/corpus_edit.h"
#include "tests/support/small_disk.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

CommandResult run(const std::string& command) { return test::run_command(command); }
fs::path scratch(const std::string& name) { return test::scratch_dir("prep-faults", name); }

std::string prep_command(const fs::path& corpus, const fs::path& cache, const std::string& extra = "") {
  return std::string(SLUICE_BINARY) + " prep --corpus '" + corpus.string() + "' --out '" + cache.string() +
         "' --set cache.shard_size=16 --set prep.progress_interval_s=0.2 " + extra;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

nlohmann::json manifest_of(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  return nlohmann::json::parse(in);
}

// Every shard file in dir, checked on its own (no manifest needed): what a resumed prep keeps.
void expect_shards_intact(const fs::path& dir, const std::string& fingerprint) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (cache::parse_shard_file_name(entry.path()) < 0) continue;
    const cache::VerifyResult check = cache::verify_shard(entry.path(), fingerprint);
    EXPECT_TRUE(check.ok()) << entry.path() << ": " << check.to_text();
  }
}

int count_shards(const fs::path& dir) {
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir)) shards += cache::parse_shard_file_name(entry.path()) >= 0;
  return shards;
}

void flip_bytes(const fs::path& file, uint64_t offset, int count) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  for (int i = 0; i < count; ++i) {
    io.seekg(static_cast<std::streamoff>(offset + static_cast<uint64_t>(i)));
    const char byte = static_cast<char>(io.get() ^ 0x5a);
    io.seekp(static_cast<std::streamoff>(offset + static_cast<uint64_t>(i)));
    io.put(byte);
  }
}

// A child process running `argv` with its output in `log`; its pid is the sluice process's own.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(out, 2);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// The child's exit code (128 + signal when a signal ended it), or -1 when it ran past `limit`
// (it is then killed).
int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The sample corpus's one-process cache, made once; the tests copy it or read its sizes.
class PrepFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_ = scratch("reference");
    const CommandResult result = run(prep_command(SLUICE_SAMPLE_CORPUS, reference_));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    fingerprint_ = manifest_of(reference_)["fingerprint"].get<std::string>();
  }

  // A copy of the reference cache to damage.
  static fs::path copy_of_reference(const std::string& name) {
    const fs::path copy = scratch(name);
    fs::copy(reference_, copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return copy;
  }

  static fs::path reference_;
  static std::string fingerprint_;
};
fs::path PrepFaults::reference_;
std::string PrepFaults::fingerprint_;

using test::SmallDisk;

uint64_t shard_kib(const fs::path& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (cache::parse_shard_file_name(entry.path()) >= 0) bytes += fs::file_size(entry.path());
  }
  return bytes / 1024;
}

// What every disk-full failure must look like: the environment's exit code (5), no crash, one
// message naming the file and the reason, no HDF5 diagnostic dump, and the way out.
void expect_one_clear_disk_full_error(const CommandResult& result, const std::string& file_part) {
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_LT(result.exit_code, 128) << "killed by signal " << result.exit_code - 128 << "\n" << result.output;
  EXPECT_TRUE(contains(result.output, "no space left on device")) << result.output;
  EXPECT_TRUE(contains(result.output, file_part)) << result.output;
  EXPECT_TRUE(contains(result.output, "free space on that file system")) << result.output;
  EXPECT_TRUE(contains(result.output, "rerun `sluice prep` with the same settings to resume")) << result.output;
  EXPECT_FALSE(contains(result.output, "HDF5-DIAG")) << result.output;
  EXPECT_FALSE(contains(result.output, "#000:")) << result.output;
  EXPECT_FALSE(contains(result.output, "Segmentation fault")) << result.output;
  EXPECT_FALSE(contains(result.output, "internal error")) << result.output;
  EXPECT_FALSE(contains(result.output, "cache ready")) << result.output;
}

TEST_F(PrepFaults, DiskFullWhileShardsAreWrittenIsOneClearErrorAndTheRerunResumes) {
  SmallDisk disk(scratch("disk-shards") / "mnt");
  // Half of the shards fit.
  if (!disk.resize(shard_kib(reference_) / 2)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const fs::path cache = disk.path() / "cache";

  const CommandResult full = run(prep_command(SLUICE_SAMPLE_CORPUS, cache, "--threads 1"));
  expect_one_clear_disk_full_error(full, "shard-0000");
  EXPECT_FALSE(fs::exists(cache / "manifest.json"));
  const int written = count_shards(cache);
  EXPECT_GT(written, 0) << full.output;
  EXPECT_LT(written, 8) << full.output;
  expect_shards_intact(cache, fingerprint_);

  ASSERT_TRUE(disk.resize(64 * 1024));
  const CommandResult rerun = run(prep_command(SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_EQ(manifest_of(cache)["fingerprint"], fingerprint_);
  EXPECT_EQ(manifest_of(cache)["totals"]["samples"], 120);
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + cache.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

TEST_F(PrepFaults, DiskFullWhileTheIndexIsWrittenIsOneClearErrorAndNoCrash) {
  SmallDisk disk(scratch("disk-index") / "mnt");
  if (!disk.resize(64 * 1024)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const fs::path cache = disk.path() / "cache";
  // Every shard, then nothing else: the disk is full just when the index is to be written.
  fs::create_directories(cache);
  for (const auto& entry : fs::directory_iterator(reference_)) {
    if (cache::parse_shard_file_name(entry.path()) >= 0) fs::copy_file(entry.path(), cache / entry.path().filename());
  }
  ASSERT_TRUE(disk.resize(disk.used_kib() + 12));  // the lock file and a few pages; index.h5 is ~30 KiB

  const CommandResult full = run(prep_command(SLUICE_SAMPLE_CORPUS, cache));
  expect_one_clear_disk_full_error(full, "index.h5");
  EXPECT_TRUE(contains(full.output, "writing the cache's index and manifest failed")) << full.output;
  EXPECT_FALSE(fs::exists(cache / "manifest.json"));
  EXPECT_EQ(count_shards(cache), 8);
  expect_shards_intact(cache, fingerprint_);

  ASSERT_TRUE(disk.resize(64 * 1024));
  const CommandResult rerun = run(prep_command(SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + cache.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

// A float WAV of 2 s whose samples are all 1e30: finite, but its power spectrum overflows.
void write_huge_float_wav(const fs::path& path) {
  SF_INFO info{};
  info.samplerate = 22050;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  std::vector<float> samples(2 * 22050);
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = (i % 2 ? 1e30f : -1e30f);
  // Written as is: libsndfile's float normalisation would not touch float data either way.
  sf_command(file, SFC_SET_NORM_FLOAT, nullptr, SF_FALSE);
  ASSERT_EQ(sf_writef_float(file, samples.data(), static_cast<sf_count_t>(samples.size())),
            static_cast<sf_count_t>(samples.size()));
  sf_close(file);
}

TEST_F(PrepFaults, ClipWithHugeFiniteSamplesIsARejectNotAFailedJob) {
  const fs::path corpus = scratch("huge-corpus");
  fs::copy(SLUICE_SAMPLE_CORPUS, corpus, fs::copy_options::recursive);
  write_huge_float_wav(corpus / "wavs" / "LJS-EN-0007.wav");
  const fs::path cache = scratch("huge-cache");

  const CommandResult result = run(prep_command(corpus, cache));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(manifest_of(cache)["totals"]["samples"], 119);
  EXPECT_EQ(manifest_of(cache)["totals"]["rejects"], 1);
  const auto reject = test::first_reject(cache);
  ASSERT_FALSE(reject.is_null());
  EXPECT_EQ(reject["id"], "LJS-EN-0007");
  EXPECT_EQ(reject["reason"], "non_finite_features");
  EXPECT_TRUE(contains(reject["detail"].get<std::string>(), "LJS-EN-0007.wav")) << reject.dump();
  EXPECT_TRUE(contains(reject["detail"].get<std::string>(), "1e+30")) << reject.dump();
  EXPECT_TRUE(contains(result.output, "non_finite_features=1")) << result.output;
}

// A JSONL manifest naming a named pipe as a clip's audio (issue 27: prep waited on it forever,
// silently, on 1 and 2 ranks): rejected as not a regular file, and the job ends.
TEST_F(PrepFaults, FifoInTheCorpusIsARejectNotAHang) {
  const fs::path corpus = scratch("fifo-corpus");
  ASSERT_EQ(::mkfifo((corpus / "pipe.wav").c_str(), 0644), 0);
  {
    std::ofstream manifest(corpus / "list.jsonl");
    for (const std::string id : {"LJS-EN-0001", "LJS-EN-0002", "LJS-EN-0003"}) {
      fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / (id + ".wav"), corpus / (id + ".wav"));
      manifest << nlohmann::json{{"id", id}, {"audio", id + ".wav"}, {"text", "a clip"}}.dump() << "\n";
    }
    manifest << nlohmann::json{{"id", "LJS-EN-0007"}, {"audio", "pipe.wav"}, {"text", "a pipe"}}.dump() << "\n";
  }
  const fs::path cache = scratch("fifo-cache");
  const fs::path log = scratch("fifo-log") / "prep.log";
  // 1 of 4 rejected: allowed for this corpus.
  const pid_t pid =
      spawn({"/bin/sh", "-c", prep_command(corpus / "list.jsonl", cache, "--set prep.max_reject_fraction=0.5")}, log);
  const int code = wait_for(pid, std::chrono::seconds(60));
  ASSERT_NE(code, -1) << "prep still running after 60 s:\n" << read_text(log);
  EXPECT_EQ(code, 0) << read_text(log);
  EXPECT_EQ(manifest_of(cache)["totals"]["rejects"], 1);
  const auto reject = test::first_reject(cache);
  ASSERT_FALSE(reject.is_null());
  EXPECT_EQ(reject["id"], "LJS-EN-0007");
  EXPECT_EQ(reject["reason"], "unreadable_audio");
  EXPECT_TRUE(contains(reject["detail"].get<std::string>(), "not a regular file")) << reject.dump();
}

// A 100 KB transcript on a 3-6 s clip (issue 27: it became 102,399 tokens in the cache and failed
// training on every model rank with a 156 GiB allocation): a too_many_tokens reject naming the
// count and the rate, and the rest of the corpus is prepared.
TEST_F(PrepFaults, TranscriptFarLongerThanItsClipIsARejectNotACacheRow) {
  const fs::path corpus = scratch("long-text");
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "word ";
  test::copy_corpus_with_text(SLUICE_SAMPLE_CORPUS, corpus / "corpus", "LJS-EN-0007", words);
  const fs::path cache = scratch("long-text-cache");
  const CommandResult result = run(prep_command(corpus / "corpus", cache));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(manifest_of(cache)["totals"]["samples"], 119);
  const auto reject = test::first_reject(cache);
  ASSERT_FALSE(reject.is_null());
  EXPECT_EQ(reject["id"], "LJS-EN-0007");
  EXPECT_EQ(reject["reason"], "too_many_tokens");
  EXPECT_TRUE(contains(reject["detail"].get<std::string>(), "tokens > prep.max_tokens 1000")) << reject.dump();
  EXPECT_TRUE(contains(result.output, "too_many_tokens=1")) << result.output;
  // The per-second cap alone (60 tokens a second by default is more than any speech).
  const fs::path rate_cache = scratch("rate-cache");
  const CommandResult rate = run(prep_command(SLUICE_SAMPLE_CORPUS, rate_cache, "--set prep.max_tokens_per_second=5 "
                                                                               "--set prep.max_reject_fraction=1"));
  ASSERT_EQ(rate.exit_code, 0) << rate.output;
  const auto rate_reject = test::first_reject(rate_cache);
  ASSERT_FALSE(rate_reject.is_null());
  EXPECT_TRUE(contains(rate_reject["detail"].get<std::string>(), "a second > prep.max_tokens_per_second 5"))
      << rate_reject.dump();
}

// What a corpus may put in front of a user (issue 27): a speaker name holding terminal escape
// sequences is printed by `cache inspect` with them made visible, a language that is no language
// code ("<script>") is a reject, not a language of the cache, and a cache folder named with HTML is
// literal text in report.md's title.
TEST_F(PrepFaults, NamesFromTheCorpusCannotDriveTheTerminalOrTheReport) {
  const fs::path corpus = scratch("hostile-corpus");
  {
    std::ofstream manifest(corpus / "list.jsonl");
    for (const std::string id : {"LJS-EN-0001", "LJS-EN-0002", "LJS-EN-0003", "LJS-EN-0004"}) {
      fs::copy_file(fs::path(SLUICE_SAMPLE_CORPUS) / "wavs" / (id + ".wav"), corpus / (id + ".wav"));
      nlohmann::json row = {{"id", id}, {"audio", id + ".wav"}, {"text", "a clip"}, {"speaker", "\x1b[31mred\x1b[0m"}};
      if (id == "LJS-EN-0004") row["language"] = "<script>";
      manifest << row.dump() << "\n";
    }
  }
  const fs::path cache = scratch("hostile") / "cache-<b>bold</b>";
  const CommandResult result =
      run(prep_command(corpus / "list.jsonl", cache, "--set prep.max_reject_fraction=0.5"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(manifest_of(cache)["totals"]["samples"], 3);
  EXPECT_EQ(manifest_of(cache)["languages"], nlohmann::json({"en"}));
  const auto reject = test::first_reject(cache);
  EXPECT_EQ(reject["reason"], "malformed_row") << reject.dump();
  EXPECT_TRUE(contains(reject.dump(), "is not a language code")) << reject.dump();
  const CommandResult inspect = run(std::string(SLUICE_BINARY) + " cache inspect '" + cache.string() + "'");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "\\x1b[31mred\\x1b[0m")) << inspect.output;
  EXPECT_FALSE(contains(inspect.output, "\x1b[31m")) << inspect.output;
  const std::string title = read_text(cache / "report.md").substr(0, 200);
  EXPECT_TRUE(contains(title, "cache-&lt;b&gt;bold&lt;/b&gt;")) << title;
  EXPECT_FALSE(contains(title, "<b>")) << title;
}

// Audio this user may not read (issue 27: as a non-root user every row read as missing_audio, and
// the job exited 3 for too many rejects): the machine's refusal, said once, naming the folder or
// file, exit 5. Run as `nobody` (setpriv): root reads everything.
TEST_F(PrepFaults, AudioTheUserMayNotReadIsAPermissionErrorNotMissingAudio) {
  if (::geteuid() != 0 || run("command -v setpriv").exit_code != 0) GTEST_SKIP() << "needs root and setpriv";
  const fs::path work = scratch("no-permission");
  fs::permissions(work, fs::perms::all);
  const auto as_nobody = [](const std::string& command) {
    return run("setpriv --reuid=65534 --regid=65534 --clear-groups -- " + command);
  };
  // The folder of clips cannot be listed.
  const fs::path corpus = work / "corpus";
  fs::copy(SLUICE_SAMPLE_CORPUS, corpus, fs::copy_options::recursive);
  fs::permissions(corpus / "wavs", fs::perms::owner_all);
  const CommandResult folder = as_nobody(prep_command(corpus, work / "cache-folder"));
  EXPECT_EQ(folder.exit_code, 5) << folder.output;
  EXPECT_TRUE(contains(folder.output, "permission denied")) << folder.output;
  EXPECT_TRUE(contains(folder.output, (corpus / "wavs").string())) << folder.output;
  EXPECT_FALSE(contains(folder.output, "missing_audio")) << folder.output;
  // One clip cannot be opened.
  fs::permissions(corpus / "wavs", fs::perms::all);
  fs::permissions(corpus / "wavs" / "LJS-EN-0007.wav", fs::perms::owner_read | fs::perms::owner_write);
  const CommandResult file = as_nobody(prep_command(corpus, work / "cache-file"));
  EXPECT_EQ(file.exit_code, 5) << file.output;
  EXPECT_TRUE(contains(file.output, "permission denied")) << file.output;
  EXPECT_TRUE(contains(file.output, "LJS-EN-0007.wav")) << file.output;
}

TEST_F(PrepFaults, DamagedFinishedShardIsRebuiltOnRerun) {
  const fs::path cache = copy_of_reference("flipped");
  const fs::path shard = cache / "shard-00001.h5";
  const auto bytes_before = fs::file_size(shard);
  flip_bytes(shard, fs::file_size(shard) / 2, 4);  // inside /mel's chunks, which fill most of a shard
  const CommandResult damaged = run(std::string(SLUICE_BINARY) + " cache verify " + cache.string());
  ASSERT_NE(damaged.exit_code, 0) << "the flip did not damage the shard:\n" << damaged.output;

  const CommandResult rerun = run(prep_command(SLUICE_SAMPLE_CORPUS, cache));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, "shard-00001.h5 from an earlier run is damaged")) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, "rebuilding it")) << rerun.output;
  EXPECT_FALSE(contains(rerun.output, "shard-00000.h5 from an earlier run is damaged")) << rerun.output;
  EXPECT_EQ(fs::file_size(shard), bytes_before);  // the same content again
  const CommandResult verify = run(std::string(SLUICE_BINARY) + " cache verify " + cache.string());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  // The other seven shards were kept, not rewritten: the summary's "kept" column says 7.
  EXPECT_TRUE(contains(rerun.output, "       8       7")) << rerun.output;
}

TEST_F(PrepFaults, EmptyMetadataSaysTheCorpusHasNoSamples) {
  const fs::path corpus = scratch("empty-corpus");
  fs::create_directories(corpus / "wavs");
  std::ofstream(corpus / "metadata.csv").close();
  const CommandResult result = run(prep_command(corpus, scratch("empty-cache")));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, (corpus / "metadata.csv").string())) << result.output;
  EXPECT_TRUE(contains(result.output, "has no samples")) << result.output;
  EXPECT_FALSE(contains(result.output, "write_index")) << result.output;
}

TEST_F(PrepFaults, DoctorOnACacheMissingAShardFailsNamingIt) {
  const fs::path cache = copy_of_reference("missing-shard");
  fs::remove(cache / "shard-00002.h5");
  const CommandResult doctor = run(std::string(SLUICE_BINARY) + " doctor --cache " + cache.string());
  EXPECT_NE(doctor.exit_code, 0) << doctor.output;
  EXPECT_LT(doctor.exit_code, 128) << doctor.output;
  EXPECT_TRUE(contains(doctor.output, "shard-00002.h5")) << doctor.output;
  EXPECT_TRUE(contains(doctor.output, "is missing")) << doctor.output;
}

TEST_F(PrepFaults, SecondPrepIntoTheSameDirectoryIsRefusedNamingTheFirst) {
  const fs::path cache = scratch("two-preps");
  const fs::path first_log = cache.parent_path() / "first-prep.log";
  // Slowed down (50 ms per clip) so that it still runs when the second one starts.
  const pid_t first = spawn({SLUICE_BINARY, "prep", "--corpus", SLUICE_SAMPLE_CORPUS, "--out", cache.string(),
                             "--threads", "1", "--set", "cache.shard_size=16", "--set", "debug.delay_stage=decode",
                             "--set", "debug.delay_ms=50"},
                            first_log);
  ASSERT_GT(first, 0);
  // The first prep has taken the lock once its holder line is in the lock file.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(read_text(cache / "prep.lock"), "\"pid\"") && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(contains(read_text(cache / "prep.lock"), "\"pid\"")) << read_text(first_log);

  const auto started = std::chrono::steady_clock::now();
  const CommandResult second = run(prep_command(SLUICE_SAMPLE_CORPUS, cache));
  const double second_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_TRUE(contains(second.output, "another prep holds this cache (pid " + std::to_string(first) + " on host "))
      << second.output;
  EXPECT_FALSE(contains(second.output, "rename")) << second.output;
  // Refused at once: the first prep (at least 6 s of clips) still runs when the second has ended.
  int status = 0;
  EXPECT_EQ(::waitpid(first, &status, WNOHANG), 0) << "the second prep took " << second_s << " s";
  const int first_code = wait_for(first, std::chrono::seconds(300));
  EXPECT_EQ(first_code, 0) << read_text(first_log);

  // The first prep's lock file stays, but a lock no live process holds blocks nobody; nor does
  // the lock of a prep killed by SIGKILL.
  const pid_t killed = spawn({SLUICE_BINARY, "prep", "--corpus", SLUICE_SAMPLE_CORPUS, "--out", cache.string(),
                              "--overwrite", "--set", "cache.shard_size=16", "--set", "features.n_mels=64"},
                             cache.parent_path() / "killed-prep.log");
  while (!contains(read_text(cache / "prep.lock"), "\"pid\": " + std::to_string(killed)) &&
         !contains(read_text(cache / "prep.lock"), "\"pid\":" + std::to_string(killed)) &&
         std::chrono::steady_clock::now() < until + std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_for(killed, std::chrono::seconds(30)), 128 + SIGKILL);
  const CommandResult after = run(prep_command(SLUICE_SAMPLE_CORPUS, cache, "--overwrite"));
  EXPECT_EQ(after.exit_code, 0) << after.output;
}

TEST_F(PrepFaults, ShardTruncatedBeforeTrainIsNamedNotSigbus) {
  const fs::path cache = copy_of_reference("truncated-before-train");
  fs::resize_file(cache / "shard-00003.h5", fs::file_size(cache / "shard-00003.h5") / 2);
  const CommandResult train = run(std::string(SLUICE_BINARY) + " train --cache " + cache.string() + " --run-dir " +
                                  scratch("truncated-before-run").string() + " --steps 5");
  EXPECT_NE(train.exit_code, 0) << train.output;
  EXPECT_LT(train.exit_code, 128) << "killed by signal " << train.exit_code - 128 << "\n" << train.output;
  EXPECT_TRUE(contains(train.output, "shard-00003.h5")) << train.output;
  EXPECT_TRUE(contains(train.output, "truncated")) << train.output;
  EXPECT_TRUE(contains(train.output, "sluice cache verify")) << train.output;
}

TEST_F(PrepFaults, ShardTruncatedWhileTrainReadsIsNamedNotSigbus) {
  const fs::path cache = copy_of_reference("truncated-during-train");
  const fs::path run_dir = scratch("truncated-during-run");
  const fs::path log = run_dir.parent_path() / "truncated-during-train.log";
  const pid_t train = spawn({SLUICE_BINARY, "train", "--cache", cache.string(), "--run-dir", run_dir.string(),
                             "--steps", "1000000", "--set", "train.batch_size=4", "--set", "train.log_every=1"},
                            log);
  ASSERT_GT(train, 0);
  // Once it trains, it has opened the shards it reads; then every shard loses its second half.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!contains(read_text(log), "] step ") && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const auto& entry : fs::directory_iterator(cache)) {
    if (cache::parse_shard_file_name(entry.path()) >= 0) fs::resize_file(entry.path(), fs::file_size(entry.path()) / 2);
  }
  const int code = wait_for(train, std::chrono::seconds(240));
  const std::string output = read_text(log);
  ASSERT_NE(code, -1) << "train still ran 240 s after the shards were truncated:\n" << output;
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(code, 128 + SIGBUS) << output;
  EXPECT_LT(code, 128) << "killed by signal " << code - 128 << "\n" << output;
  EXPECT_TRUE(contains(output, "shard-0000")) << output;
  EXPECT_TRUE(contains(output, "sluice cache verify")) << output;
}

}  // namespace
}  // namespace sluice
