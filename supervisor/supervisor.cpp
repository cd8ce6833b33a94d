#include "supervisor/supervisor.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"
#include "common/log.h"
#include "supervisor/host_roster.h"
#include "supervisor/round_fault.h"
#include "supervisor/round_process.h"

namespace sluice::supervisor {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int exit_failure = 1;  // docs/operations.md, "Exit codes"
constexpr int exit_usage = 2;
constexpr int max_restarts_limit = 100;  // keeps restarts.json bounded

std::shared_ptr<spdlog::logger> logger() { return log::get("supervisor"); }

double unix_s(Clock::time_point at) { return std::chrono::duration<double>(at.time_since_epoch()).count(); }

// Codes a restart cannot mend: done, a bad setting or mismatch, prep's rejects, a checkpointed
// stop, the machine's refusal; 126/127: the launcher could not be started.
bool restart_mends(int code) { return code == exit_failure || (code > 5 && code != 126 && code != 127); }

// The global step of RUN_DIR/checkpoints/latest.json, nullopt when there is none (or unreadable:
// then --resume itself says what is wrong).
std::optional<int64_t> checkpoint_step(const fs::path& run_dir) {
  const fs::path latest = run_dir / "checkpoints" / "latest.json";
  if (!fs::exists(latest)) return std::nullopt;
  try {
    return json::parse(read_file(latest)).value("global_step", int64_t{-1});
  } catch (const std::exception&) {
    return int64_t{-1};
  }
}

class Supervision {
 public:
  explicit Supervision(const SupervisorOptions& options)
      : options_(options), roster_(options.hosts, options.data_per_node) {
    if (options.launcher != "mpirun" && options.launcher != "srun") {
      throw ConfigError("--launcher must be mpirun or srun, not '" + options.launcher + "'");
    }
    if (options.max_restarts < 0 || options.max_restarts > max_restarts_limit) {
      throw ConfigError("--max-restarts must be 0 to " + std::to_string(max_restarts_limit) + ", not " +
                        std::to_string(options.max_restarts));
    }
    if (!roster_.empty() && roster_.kept_model_ranks() < options.min_model_ranks) {
      throw ConfigError("--hosts " + options.hosts + " hold " + std::to_string(roster_.kept_model_ranks()) +
                        " model rank(s), fewer than --min-model-ranks " + std::to_string(options.min_model_ranks));
    }
    record_ = {{"format", "sluice-restarts/1"},
               {"launcher", options.launcher},
               {"max_restarts", options.max_restarts},
               {"min_model_ranks", options.min_model_ranks},
               {"leave_out_after", options.leave_out_after},
               {"outcome", "running"},
               {"message", ""},
               {"rounds", json::array()},
               {"restarts", json::array()},
               {"left_out", json::array()}};
  }

  int run() {
    forward_stop_signals();
    for (int round = 1;; ++round) {
      const bool resume = round > 1 && checkpoint_step(options_.run_dir).has_value();
      FaultReader reader;
      json& entry = begin_round(round, resume);
      const int code = run_round(launch_line(resume), [&](const std::string& line, Clock::time_point at) {
        reader.read(line, at);
        if (reader.first_step_at() && round > 1) note_training_again(reader);
      });
      const auto ended = Clock::now();
      entry["ended_at_s"] = unix_s(ended);
      entry["exit_code"] = code;
      if (const int signal = received_stop_signal()) {
        return finish(code == 0 ? "finished" : "stopped", code,
                      "the supervisor got signal " + std::to_string(signal) + " and passed it on; the round exited " +
                          std::to_string(code) + " (no restart after a stop)");
      }
      if (code == 0) return finish("finished", 0, "training finished after " + std::to_string(round - 1) + " restart(s)");
      if (!restart_mends(code)) {
        return finish(code == 4 ? "stopped" : "failed", code,
                      "the round exited " + std::to_string(code) + ", which a restart does not mend (docs/operations.md, \"Exit codes\")");
      }
      RoundFault fault = reader.fault();
      if (fault.kind == FaultKind::none) {
        fault.kind = FaultKind::exited;
        fault.exit_code = code;
        fault.words = options_.launcher + " exited with code " + std::to_string(code);
        fault.seen_at = ended;
      }
      if (const auto refusal = restart_after(round, fault, reader, ended)) return *refusal;
    }
  }

 private:
  json& begin_round(int round, bool resume) {
    json entry = {{"round", round},
                  {"started_at_s", unix_s(Clock::now())},
                  {"ended_at_s", nullptr},
                  {"exit_code", nullptr},
                  {"ranks", roster_.empty() ? options_.ranks : roster_.kept_ranks()},
                  {"model_ranks", roster_.empty() ? json(nullptr) : json(roster_.kept_model_ranks())},
                  {"resume", resume}};
    record_["rounds"].push_back(entry);
    save();
    return record_["rounds"].back();
  }

  // Records the fault, leaves a host out where it should; nullopt when the next round may start,
  // else the supervision's exit code.
  std::optional<int> restart_after(int round, const RoundFault& fault, const FaultReader& reader,
                                   Clock::time_point ended) {
    // A silent rank failed when it went silent; a stuck one when its progress stopped.
    const double before_named_s = fault.kind == FaultKind::silent ? fault.silent_s
                                  : fault.kind == FaultKind::stuck ? fault.stuck_s
                                                                   : 0.0;
    const auto failed_at = before_named_s > 0
                               ? fault.seen_at - std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(before_named_s))
                               : (fault.seen_at == Clock::time_point{} ? ended : fault.seen_at);
    logger()->warn("round {} failed: {} (exit code {})", round, fault.describe(),
                   record_["rounds"].back()["exit_code"].get<int>());
    const auto left_out = roster_.count(fault, options_.leave_out_after, options_.min_model_ranks);
    json restart = {{"after_round", round},
                    {"fault", fault.to_json()},
                    {"failed_at_s", unix_s(failed_at)},
                    {"detected_at_s", unix_s(fault.seen_at == Clock::time_point{} ? ended : fault.seen_at)},
                    {"relaunched_at_s", nullptr},
                    {"training_at_s", nullptr},
                    {"lost_s", nullptr},
                    {"resumed_from_step", nullptr},
                    {"failed_round_last_step", reader.last_step()},
                    {"first_step_again", nullptr},
                    {"left_out", left_out ? json(*left_out) : json(nullptr)}};
    if (left_out) {
      const auto& host = *std::find_if(roster_.hosts().begin(), roster_.hosts().end(),
                                       [&](const RosterHost& h) { return h.name == *left_out; });
      record_["left_out"].push_back({{"host", host.name}, {"why", host.why}});
      logger()->warn("leaving host {} out of the next round ({}); {} model rank(s) remain on {} host(s)", host.name,
                     host.why, roster_.kept_model_ranks(), roster_.kept_hosts());
    }
    const int restarts = static_cast<int>(record_["restarts"].size());
    if (restarts >= options_.max_restarts) {
      record_["restarts"].push_back(restart);
      return finish("gave_up", exit_failure,
                    "round " + std::to_string(round) + " failed (" + fault.describe() + ") after " +
                        std::to_string(restarts) + " restart(s), the most --max-restarts allows; resume by hand with " +
                        "--resume (RUN_DIR " + options_.run_dir.string() + ") once the cause is fixed");
    }
    if (!roster_.empty() && roster_.kept_model_ranks() < options_.min_model_ranks) {
      record_["restarts"].push_back(restart);
      return finish("too_few_ranks", exit_failure,
                    "the next round would have " + std::to_string(roster_.kept_model_ranks()) +
                        " model rank(s), fewer than --min-model-ranks " + std::to_string(options_.min_model_ranks) +
                        "; hosts left out: " + roster_.left_out_list() + " (restarts.json says why); " +
                        "replace them and resume with --resume");
    }
    const auto step = checkpoint_step(options_.run_dir);
    restart["resumed_from_step"] = step ? json(*step) : json(nullptr);
    restart["relaunched_at_s"] = unix_s(Clock::now());
    record_["restarts"].push_back(restart);
    save();
    logger()->warn("restart {} of {}: {}; {} on {} rank(s){}", restarts + 1, options_.max_restarts, fault.describe(),
                   step ? "resuming from the checkpoint of step " + std::to_string(*step)
                        : std::string("no checkpoint yet: starting again from step 0"),
                   roster_.empty() ? options_.ranks : roster_.kept_ranks(),
                   left_out ? " (host " + *left_out + " left out: an elastic resume on fewer ranks)" : "");
    return std::nullopt;
  }

  // The first step line of a round after a restart: training is going again.
  void note_training_again(const FaultReader& reader) {
    json& restart = record_["restarts"].back();
    if (!restart["training_at_s"].is_null()) return;
    const double at = unix_s(*reader.first_step_at());
    restart["training_at_s"] = at;
    restart["first_step_again"] = reader.first_step();
    restart["lost_s"] = at - restart["failed_at_s"].get<double>();
    logger()->info("training again at step {}, {:.1f} s after the fault", reader.first_step(),
                   restart["lost_s"].get<double>());
    save();
  }

  std::vector<std::string> launch_line(bool resume) const {
    std::vector<std::string> argv;
    if (options_.launcher == "mpirun") {
      argv = {"mpirun"};
      if (!roster_.empty()) argv.insert(argv.end(), {"--host", roster_.kept_list()});
      const int ranks = roster_.empty() ? options_.ranks : roster_.kept_ranks();
      if (ranks > 0) argv.insert(argv.end(), {"-np", std::to_string(ranks)});
    } else {
      argv = {"srun", "--mpi=pmix", "--kill-on-bad-exit=1"};
      if (!roster_.empty()) {
        argv.push_back("--nodes=" + std::to_string(roster_.kept_hosts()));
        argv.push_back("--ntasks=" + std::to_string(roster_.kept_ranks()));
        // Slurm's block distribution would fill the first nodes by their CPUs, not by the list.
        if (const int slots = roster_.uniform_slots()) argv.push_back("--ntasks-per-node=" + std::to_string(slots));
        if (!roster_.left_out_list().empty()) argv.push_back("--exclude=" + roster_.left_out_list());
      } else if (options_.ranks > 0) {
        argv.push_back("--ntasks=" + std::to_string(options_.ranks));
      }
    }
    argv.insert(argv.end(), options_.launcher_args.begin(), options_.launcher_args.end());
    argv.push_back(options_.sluice);
    for (const std::string& arg : options_.train_args) {
      // A restart continues the run: --overwrite would delete the checkpoints it resumes from.
      if (resume && arg == "--overwrite") continue;
      argv.push_back(arg);
    }
    argv.insert(argv.end(), {"--run-dir", options_.run_dir.string()});
    const bool has_resume = std::find(argv.begin(), argv.end(), "--resume") != argv.end();
    if (resume && !has_resume) argv.push_back("--resume");
    std::string line;
    for (const std::string& arg : argv) line += (line.empty() ? "" : " ") + arg;
    logger()->info("round {}: {}", record_["rounds"].size(), line);
    return argv;
  }

  int finish(const std::string& outcome, int code, const std::string& message) {
    record_["outcome"] = outcome;
    record_["message"] = message;
    save();
    if (code == 0) {
      logger()->info("{}", message);
    } else {
      logger()->error("{}", message);
    }
    return code;
  }

  void save() const {
    try {
      fs::create_directories(options_.run_dir);
      write_file_atomically(options_.run_dir / "restarts.json", record_.dump(2) + "\n");
    } catch (const std::exception& error) {
      logger()->warn("could not write restarts.json: {}", error.what());
    }
  }

  SupervisorOptions options_;
  HostRoster roster_;
  json record_;
};

}  // namespace

int supervise(const SupervisorOptions& options) { return Supervision(options).run(); }

}  // namespace sluice::supervisor
