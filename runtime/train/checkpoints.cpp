#include "runtime/train/checkpoints.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "common/error.h"
#include "common/file_util.h"
#include "common/fingerprint.h"
#include "common/log.h"

namespace sluice::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

constexpr int kept_checkpoints = 3;  // enough to survive one bad write, bounded on disk

// "step-0000000040" + extension: zero-padded so that names sort by step.
std::string step_name(int64_t global_step, const char* extension) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%010lld%s", static_cast<long long>(global_step), extension);
  return name;
}

// The step of "step-N.pt" / "step-N.json" with that extension exactly; nullopt for other names
// (temporaries "step-N.pt.tmp-PID", set-aside "step-N.pt.damaged", latest.json).
std::optional<int64_t> step_of(const fs::path& path, const char* extension) {
  const std::string name = path.filename().string();
  const std::string suffix = extension;
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 + suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(5, name.size() - 5 - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

// The rename of a file into a directory survives a crash only once the directory is fsync'd:
// before that, deleting the older checkpoints could leave none.
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw Error(ErrorKind::internal, "cannot fsync the checkpoint directory " + dir.string() + ": " + reason);
  }
  ::close(fd);
}

void remove_quietly(const fs::path& path) {
  std::error_code ignored;
  fs::remove(path, ignored);
}

// The entries of `dir` (none when it does not exist), listed before the caller changes any.
std::vector<fs::path> entries_of(const fs::path& dir) {
  std::vector<fs::path> entries;
  if (!fs::is_directory(dir)) return entries;
  for (const auto& entry : fs::directory_iterator(dir)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The step of a checkpoint file or of its record.
std::optional<int64_t> checkpoint_step(const fs::path& path) {
  const auto step = step_of(path, ".pt");
  return step ? step : step_of(path, ".json");
}

// What is wrong with `bytes` as the file `record` describes; empty when they match. A record
// without a checksum (written before records existed) matches any bytes.
std::string mismatch(const json& record, const std::string& bytes) {
  if (!record.contains("xxh64")) return "";
  const auto expected_bytes = record.value("bytes", int64_t{-1});
  if (expected_bytes != static_cast<int64_t>(bytes.size())) {
    return "is " + std::to_string(bytes.size()) + " bytes, its record says " + std::to_string(expected_bytes) +
           " (cut short or overwritten)";
  }
  const std::string actual = xxh64_hex(bytes);
  if (actual != record["xxh64"].get<std::string>()) {
    return "has checksum xxh64 " + actual + ", its record says " + record["xxh64"].get<std::string>() +
           " (its bytes changed after it was written)";
  }
  return "";
}

// One checkpoint as --resume sees it: its file and, when readable, its record.
struct Candidate {
  fs::path file;
  std::optional<json> record;
  std::string problem;  // why the record is unusable, when it is
};

std::optional<json> parse_json_file(const fs::path& path, std::string& problem) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& error) {
    problem = path.filename().string() + " is not valid JSON (" + error.what() + ")";
  } catch (const Error& error) {
    problem = error.what();
  }
  return std::nullopt;
}

}  // namespace

Checkpoints::Checkpoints(const fs::path& run_dir) : dir_(run_dir / "checkpoints") {}

std::optional<json> Checkpoints::latest() const {
  const fs::path path = dir_ / "latest.json";
  if (!fs::exists(path)) return std::nullopt;
  std::string problem;
  std::optional<json> latest = parse_json_file(path, problem);
  if (!latest) throw ConfigError(dir_.string() + "/" + problem);
  return latest;
}

Checkpoints::~Checkpoints() {
  try {
    wait_written();
  } catch (const std::exception& error) {
    logger()->error("the last checkpoint was not written: {}", error.what());
  }
}

void Checkpoints::save(const std::string& bytes, const json& position) {
  wait_written();
  write(bytes, position);
}

void Checkpoints::save_in_background(std::string bytes, json position) {
  wait_written();
  writing_ = std::async(std::launch::async, [this, bytes = std::move(bytes), position = std::move(position)] {
    const auto started = std::chrono::steady_clock::now();
    write(bytes, position);
    background_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  });
}

void Checkpoints::wait_written() {
  if (!writing_.valid()) return;
  std::future<void> done = std::move(writing_);
  done.get();  // rethrows the writer's error
}

void Checkpoints::write(const std::string& bytes, const json& position) {
  const int64_t global_step = position["global_step"].get<int64_t>();
  fs::create_directories(dir_);
  std::vector<fs::path> later;
  for (const fs::path& path : entries_of(dir_)) {
    // Temporaries of a save that was killed (write_file_atomically's "NAME.tmp-PID").
    if (path.filename().string().find(".tmp-") != std::string::npos) remove_quietly(path);
    const auto step = checkpoint_step(path);
    if (step && *step > global_step) later.push_back(path);
  }
  json record = position;
  record["file"] = step_name(global_step, ".pt");
  record["bytes"] = static_cast<int64_t>(bytes.size());
  record["xxh64"] = xxh64_hex(bytes);
  write_file_atomically(dir_ / step_name(global_step, ".pt"), bytes);
  write_file_atomically(dir_ / step_name(global_step, ".json"), record.dump(2) + "\n");
  write_file_atomically(dir_ / "latest.json", record.dump(2) + "\n");
  fsync_directory(dir_);
  // Checkpoints of later steps are what a resume passed over (damaged, or a save cut short): set
  // aside, they are never resumed from nor counted below.
  for (const fs::path& path : later) {
    fs::rename(path, path.string() + ".damaged");
    logger()->warn("set aside {} (a later step than this run's, passed over by --resume) as {}.damaged",
                   path.string(), path.filename().string());
  }
  // Keep the last three, this one included; their records go with them.
  const std::vector<fs::path> kept = files();
  if (kept.size() <= static_cast<size_t>(kept_checkpoints)) return;
  const int64_t oldest_kept = *step_of(kept[kept.size() - kept_checkpoints], ".pt");
  for (const fs::path& path : entries_of(dir_)) {
    const auto step = checkpoint_step(path);
    if (step && *step < oldest_kept && *step != global_step) remove_quietly(path);
  }
}

fs::path Checkpoints::file(const json& record) const { return dir_ / record["file"].get<std::string>(); }

std::vector<fs::path> Checkpoints::files() const {
  std::vector<fs::path> found;
  for (const fs::path& path : entries_of(dir_)) {
    if (step_of(path, ".pt")) found.push_back(path);  // sorted: zero-padded names, by step
  }
  return found;
}

std::string Checkpoints::read_verified(const json& record) const {
  const fs::path path = file(record);
  if (!fs::exists(path)) throw Error(ErrorKind::internal, "checkpoint " + path.string() + " is missing");
  std::string bytes = read_file(path);
  if (const std::string wrong = mismatch(record, bytes); !wrong.empty()) {
    throw Error(ErrorKind::internal, "checkpoint " + path.string() + " " + wrong);
  }
  return bytes;
}

json Checkpoints::newest_good(bool warn) const {
  std::map<int64_t, Candidate, std::greater<>> candidates;  // newest first
  for (const fs::path& path : files()) candidates[*step_of(path, ".pt")].file = path;
  for (const fs::path& path : entries_of(dir_)) {
    const auto step = step_of(path, ".json");
    if (!step) continue;
    Candidate& candidate = candidates[*step];
    candidate.file = dir_ / step_name(*step, ".pt");
    candidate.record = parse_json_file(path, candidate.problem);
  }
  std::optional<json> latest;
  if (fs::exists(dir_ / "latest.json")) {
    std::string problem;
    latest = parse_json_file(dir_ / "latest.json", problem);
    if (!latest && warn) {
      logger()->warn("{}/{}: looking for the newest good checkpoint among the step-*.pt files instead", dir_.string(),
                     problem);
    }
  }
  // latest.json stands in for a missing or unreadable record (and for checkpoints written before
  // records existed): it is a copy of the newest one.
  if (latest && latest->is_object() && latest->value("file", json()).is_string() &&
      latest->value("global_step", json()).is_number_integer()) {
    Candidate& candidate = candidates[(*latest)["global_step"].get<int64_t>()];
    candidate.file = file(*latest);
    if (!candidate.record) {
      candidate.record = latest;
      candidate.problem.clear();
    }
  }
  if (candidates.empty()) {
    throw ConfigError("--resume: no checkpoint in " + dir_.string() + " (train.run_dir); start without --resume");
  }
  std::vector<std::string> damaged;
  for (auto& [step, candidate] : candidates) {
    std::string problem = candidate.problem;
    if (problem.empty() && !candidate.record) {
      problem = "has no record (" + step_name(step, ".json") + "): its save was cut short";
    } else if (problem.empty() && !fs::exists(candidate.file)) {
      problem = "is missing";
    } else if (problem.empty()) {
      try {
        problem = mismatch(*candidate.record, read_file(candidate.file));
      } catch (const json::exception& error) {
        problem = "has a malformed record (" + std::string(error.what()) + ")";
      }
    }
    if (!problem.empty()) {
      damaged.push_back(candidate.file.string() + " " + problem);
      continue;
    }
    if (warn) {
      for (const std::string& line : damaged) logger()->warn("checkpoint {}: passed over", line);
      if (!damaged.empty()) {
        logger()->warn("resuming from {} (global step {}), the newest good checkpoint", candidate.file.string(), step);
      }
      if (!candidate.record->contains("xxh64")) {
        logger()->warn("{} has no checksum (written before sluice recorded them): resuming from it unverified",
                       candidate.file.string());
      }
    }
    return *candidate.record;
  }
  std::string list;
  for (const std::string& line : damaged) list += "\n  " + line;
  throw ConfigError("--resume: no good checkpoint in " + dir_.string() + "; every one is damaged:" + list +
                    "\nrestore one from a copy, or start the run again with --overwrite");
}

int Checkpoints::remove_all() const {
  int removed = 0;
  for (const fs::path& path : entries_of(dir_)) {
    const std::string name = path.filename().string();
    if (name.rfind("step-", 0) != 0 && name.rfind("latest.json", 0) != 0) continue;  // not ours
    if (step_of(path, ".pt")) ++removed;
    fs::remove(path);
  }
  return removed;
}

json checkpoint_position(const PlanSchedule& schedule, int64_t global_step) {
  const PlanRecord record = schedule.record(global_step);
  json earlier = json::array();
  for (const EpochSegment& segment : record.earlier) {
    earlier.push_back({{"model_ranks", segment.model_ranks}, {"steps", segment.steps}});
  }
  return json{{"global_step", global_step},   {"epoch", record.at.epoch},
              {"step", record.at.step},         {"plan", record.fingerprint},
              {"model_ranks", record.model_ranks}, {"epoch_segments", earlier},
              {"plan_version", record.plan_version}, {"carried", record.carried}};
}

json resume_position(const fs::path& run_dir, PlanSchedule& schedule, bool warn) {
  json latest = Checkpoints(run_dir).newest_good(warn);
  PlanRecord record;
  record.global_step = latest["global_step"].get<int64_t>();
  record.at = {latest["epoch"].get<int64_t>(), latest["step"].get<int64_t>()};
  record.fingerprint = latest["plan"].get<std::string>();
  record.model_ranks = latest.value("model_ranks", 0);  // absent before elastic resume
  for (const json& segment : latest.value("epoch_segments", json::array())) {
    record.earlier.push_back({segment["model_ranks"].get<int>(), segment["steps"].get<int64_t>()});
  }
  record.plan_version = latest.value("plan_version", 0);  // absent: version 1, which dropped the remainder
  record.carried = latest.value("carried", std::vector<int64_t>{});
  latest["elastic"] = schedule.resume(record);
  return latest;
}

namespace {

// An attempt's own files in `run_dir`, beside the checkpoints: the per-rank stats and timelines and
// the report. Files, not folders: a folder may be a mount point (a node-local timeline/ on each node).
std::vector<fs::path> attempt_files(const fs::path& run_dir) {
  std::vector<fs::path> files;
  for (const char* dir : {"ranks", "timeline"}) {
    for (const fs::path& path : entries_of(run_dir / dir)) {
      if (path.filename().string().rfind("rank-", 0) == 0) files.push_back(path);
    }
  }
  for (const char* name : {"report.md", "report.json", "report.html", "trace.json"}) {
    if (fs::exists(run_dir / name)) files.push_back(run_dir / name);
  }
  return files;
}

}  // namespace

fs::path set_aside_earlier_attempt(const fs::path& run_dir) {
  const std::vector<fs::path> files = attempt_files(run_dir);
  if (files.empty()) return {};
  fs::path folder;
  for (int n = 1;; ++n) {
    folder = run_dir / "attempts" / std::to_string(n);
    if (!fs::exists(folder)) break;
  }
  for (const fs::path& file : files) {
    const fs::path to = folder / fs::relative(file, run_dir);
    std::error_code error;
    fs::create_directories(to.parent_path(), error);
    if (!error) fs::rename(file, to, error);
    if (error) throw_file_error(error.value(), "move the earlier attempt's file to", to.string(), ErrorKind::internal);
  }
  logger()->info("the earlier attempt's per-rank files and report are in {} (this run's report covers this run only)",
                 folder.string());
  return folder;
}

void claim_fresh_run_dir(const fs::path& run_dir, bool overwrite, bool remove) {
  const Checkpoints checkpoints(run_dir);
  const std::vector<fs::path> files = checkpoints.files();
  const bool latest = fs::exists(checkpoints.dir() / "latest.json");
  if (files.empty() && !latest) return;
  if (!overwrite) {
    throw ConfigError("train.run_dir " + run_dir.string() + " holds " + std::to_string(files.size()) +
                      " checkpoint(s) of an earlier run" +
                      (files.empty() ? " (latest.json)" : " (the newest: " + files.back().filename().string() + ")") +
                      "; a new run there would mix its checkpoints with those. Continue that run with --resume, "
                      "or start a new one over it with --overwrite (deletes them), or choose another --run-dir");
  }
  if (!remove) return;
  const int removed = checkpoints.remove_all();
  // The earlier run's per-rank files and report would mix into this run's report.
  for (const fs::path& file : attempt_files(run_dir)) fs::remove(file);
  logger()->info("--overwrite: deleted {} checkpoint(s) of an earlier run, its per-rank files and its report from {}",
                 removed, run_dir.string());
}

}  // namespace sluice::runtime
