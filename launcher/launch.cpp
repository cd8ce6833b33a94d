// The dispatch both executables share (launch.h): the commands that need no libtorch (prep,
// cache, config, report: commands/), the exit codes, the end of a failed job, and the parse of the
// command line (naming a misspelt command or option). It holds no command's logic: each command's
// line is in commands/, which hands over to runtime/, cache/ or report/.
#include "launcher/launch.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <future>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "commands/bench_command.h"
#include "commands/cache_command.h"
#include "commands/config_command.h"
#include "commands/doctor_command.h"
#include "commands/prep_command.h"
#include "commands/report_command.h"
#include "commands/supervise_command.h"
#include "commands/train_command.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "common/text_match.h"
#include "runtime/prep/prep_job.h"

namespace sluice::launcher {
namespace {

// The exit codes of every command: the contract scripts and Slurm wrappers rely on
// (docs/operations.md, "Exit codes"). Nothing else may leave main(): CLI11's own codes for a bad
// command line (100 and up) become exit_usage.
constexpr int exit_ok = 0;
constexpr int exit_failure = 1;  // a runtime failure: the log names the file, sample or rank
constexpr int exit_usage = 2;    // bad option or config, or settings that disagree with the cache
constexpr int exit_environment = 5;  // the machine refused: disk full, read-only, permissions
static_assert(runtime::prep_too_many_rejects == 3, "docs/operations.md documents 3");

constexpr const char* exit_codes_help =
    "Exit codes (every command; docs/operations.md, \"Exit codes\"): 0 done; 1 failed (the error names "
    "the file, sample, rank or host; supervise: restarts used up, or too few hosts left for --min-model-ranks); 2 bad option or config, or settings that disagree with an existing "
    "cache; 3 prep: more rejects than prep.max_reject_fraction; 4 train: stopped by SIGTERM/SIGUSR1 after "
    "writing a checkpoint (rerun with --resume); 5 the machine refused (disk full, read-only file system, "
    "permissions: the file is named; fix it and rerun).";

// The commands that need neither libtorch nor other ranks.
struct OfflineCommands {
  CacheCommand cache;
  ConfigCommand config;
  ReportCommand report;
  SuperviseCommand supervise;

  void add(CLI::App& app) {
    cache.add(app);
    config.add(app);
    report.add(app);
    supervise.add(app);
  }
  // The chosen command's exit code, or nullopt when none of these was chosen.
  std::optional<int> run() const {
    if (const auto code = cache.run()) return code;
    if (const auto code = config.run()) return code;
    if (const auto code = report.run()) return code;
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    return supervise.run(error ? std::string("sluice") : self.string());
  }
};

// In the `sluice` executable: train, doctor and bench in --help's list only (sluice-train runs
// them; main hands them over before parsing, so these are never chosen here).
void list_torch_commands(CLI::App& app) {
  for (const auto& [name, summary] : {std::pair{"train", train_summary}, std::pair{"doctor", doctor_summary},
                                      std::pair{"bench", bench_summary}}) {
    app.add_subcommand(name, summary)->allow_extras()->footer("Runs in sluice-train (launcher/launch.h).");
  }
}

int exit_code_of(const Error& error) {
  switch (error.kind()) {
    case ErrorKind::config: return exit_usage;
    case ErrorKind::environment: return exit_environment;
    default: return exit_failure;
  }
}

// A job's error on this rank, said once and ended with the exit code of the contract in every
// layout (docs/operations.md, "Exit codes"):
//  - The same error on every rank (Error::on_every_rank, or a config error before the ranks
//    started their parts: the heartbeat not yet running): rank 0 says it; every rank returns its
//    code, no abort needed.
//  - This rank's own error: it says it, tells the others it failed and with which code, waits
//    `abort_grace_s` (the ranks waiting on it stop at once, name it and write their timelines,
//    which the abort would otherwise cut off), then ends the job with that code. MPI_Abort's code
//    becomes mpirun's exit code (Open MPI).
//  - The consequence of another rank's failure (it announced one; or a channel to it aborted,
//    Error::after_peer_failure, and it announces within two heartbeats: its channels abort while it
//    unwinds, before it can say so):
//    this rank's view goes to the log as a warning, and the job ends with the failed rank's code.
//    A model rank whose checkpoint did not fit once showed only its data rank's "the receiver
//    aborted", exit 1 instead of 2.
int end_job(const MpiSession& session, const Error& error, double abort_grace_s) {
  const int code = exit_code_of(error);
  const bool everywhere =
      error.on_every_rank() || (error.kind() == ErrorKind::config && !session.heartbeat_running());
  if (session.size() == 1 || everywhere) {
    if (session.rank() == 0 || session.size() == 1) {
      log::get("launcher")->error("{}: {}", to_string(error.kind()), error.what());
    }
    return code;
  }
  const double news_wait_s =
      error.after_peer_failure() ? std::min(abort_grace_s, 2 * session.heartbeat_interval_s() + 0.1) : 0.0;
  if (const auto failure = session.first_failure(news_wait_s)) {
    log::get("launcher")->warn("after {} failed: {}: {}", session.describe(failure->rank), to_string(error.kind()),
                               error.what());
    log::get("launcher")->flush();
    std::this_thread::sleep_for(std::chrono::duration<double>(abort_grace_s));
    session.abort(failure->code);
  }
  log::get("launcher")->error("{}: {}", to_string(error.kind()), error.what());
  log::get("launcher")->flush();
  session.announce_failure(code);
  std::this_thread::sleep_for(std::chrono::duration<double>(abort_grace_s));
  session.abort(code);
}

// CLI11 answers a misspelt command (`sluice cache verfy DIR`) with "A subcommand is required" and
// a misspelt option with "The following arguments were not expected": neither says which word it
// could not place, nor what was meant. These two name it, with the closest name as a suggestion.

// The first command word that is not a command of its level (where one is required), with the
// commands there; "" when every command word is known.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  std::string path = "sluice";
  for (int i = 1; i < argc && level->get_require_subcommand_min() > 0; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";  // an option: CLI11's own message says more
    std::vector<std::string> names;
    const CLI::App* chosen = nullptr;
    for (const CLI::App* command : level->get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(command->get_name());
      if (command->check_name(word)) chosen = command;
    }
    if (chosen == nullptr) {
      std::string list;
      for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
      const std::string close = closest_match(word, names);
      return path + ": unknown command '" + word + "'" + (close.empty() ? "." : "; did you mean '" + close + "'?") +
             " The commands are: " + list + ".";
    }
    level = chosen;
    path += " " + chosen->get_name();
  }
  return "";
}

// For each --option the chosen command does not have, the closest one it has; "" when none is
// close. The command's own options and those of the commands above it (--help) count.
std::string misspelt_options(const CLI::App& app, int argc, char** argv) {
  const CLI::App* command = &app;
  std::vector<std::string> known;
  for (;;) {
    for (const CLI::Option* option : command->get_options()) {
      for (const auto& name : option->get_lnames()) known.push_back(name);
    }
    const auto chosen = command->get_subcommands();
    if (chosen.empty()) break;
    command = chosen.front();
  }
  std::string hints;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0 || word.size() == 2) continue;
    word = word.substr(2, word.find('=') == std::string::npos ? std::string::npos : word.find('=') - 2);
    if (std::find(known.begin(), known.end(), word) != known.end()) continue;
    if (const std::string close = closest_match(word, known); !close.empty()) {
      hints += "--" + word + ": did you mean --" + close + "?\n";
    }
  }
  return hints;
}

// Parses the command line. CLI11 prints --help and --version (exit 0) and a bad command line
// with its reason (exit 2, not CLI11's own codes); nullopt when the chosen command should run.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    std::cerr << unknown << "\nRun with --help for more information." << std::endl;
    return exit_usage;
  }
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& error) {
    if (const std::string hints = misspelt_options(app, argc, argv); !hints.empty() && error.get_exit_code() != 0) {
      std::cerr << error.what() << "\n" << hints << "Run with --help for more information." << std::endl;
      return exit_usage;
    }
    return app.exit(error) == 0 ? exit_ok : exit_usage;
  }
}

// The commands that need no MPI; nullopt when the chosen command is a job.
std::optional<int> run_without_mpi(const OfflineCommands& offline, TorchCommands* torch) {
  try {
    if (const auto code = offline.run()) return *code;
    return torch != nullptr ? torch->run_without_mpi() : std::nullopt;
  } catch (const Error& error) {
    log::get("launcher")->error("{}: {}", to_string(error.kind()), error.what());
    return exit_code_of(error);
  } catch (const std::exception& error) {
    if (const auto refusal = machine_refusal(error)) {
      log::get("launcher")->error("{}: {}", to_string(refusal->kind()), refusal->what());
      return exit_code_of(*refusal);
    }
    log::get("launcher")->error("internal error: {}", error.what());
    return exit_failure;
  }
}

}  // namespace

int launch(int argc, char** argv, TorchCommands* torch) {
  CLI::App app{
      "sluice keeps training GPUs fed: an offline cache of mel features and token ids in sharded "
      "HDF5, prepared in parallel under mpirun/srun or in one process."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  PrepCommand prep;
  prep.add(app);
  if (torch != nullptr) {
    torch->add(app);
  } else {
    list_torch_commands(app);
  }
  OfflineCommands offline;
  offline.add(app);

  app.footer(exit_codes_help);
  if (const auto code = parse_command_line(app, argc, argv)) return *code;
  if (const auto code = run_without_mpi(offline, torch)) return *code;
  if (torch == nullptr && !prep.chosen()) {
    // Not reached from main, which hands these commands over before parsing.
    log::get("launcher")->error("train, doctor and bench run in sluice-train, which this executable starts for them");
    return exit_usage;
  }

  if (prep.chosen()) prep.start();
  MpiSession session(&argc, &argv, prep.chosen() ? prep.join_timeout_s() : torch->join_timeout_s());
  double abort_grace_s = 1.0;  // until train reads runtime.timeout_s
  try {
    if (torch != nullptr) {
      if (const auto code = torch->run_with_mpi(session, abort_grace_s)) return *code;
    }
    return prep.run(session);
  } catch (const Error& error) {
    return end_job(session, error, abort_grace_s);
  } catch (const std::exception& error) {
    // Memory or a thread the machine refused is its refusal (exit 5), said as such.
    if (const auto refusal = machine_refusal(error)) return end_job(session, *refusal, abort_grace_s);
    log::get("launcher")->error("internal error: {}", error.what());
    if (session.size() > 1) session.abort(exit_failure);
    return exit_failure;
  }
}

}  // namespace sluice::launcher
