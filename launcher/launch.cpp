// The command line both executables share (launch.h): the commands that need no libtorch (prep,
// cache, config, report), the exit codes, and the dispatch. It holds no logic of its own: each
// command hands over to runtime/, cache/ or report/.
#include "launcher/launch.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "cache/cache_inspector.h"
#include "cache/cache_verifier.h"
#include "commands/bench_command.h"
#include "commands/doctor_command.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "launcher/options.h"
#include "report/write_report.h"
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
    "the file, sample, rank or host); 2 bad option or config, or settings that disagree with an existing "
    "cache; 3 prep: more rejects than prep.max_reject_fraction; 4 train: stopped by SIGTERM/SIGUSR1 after "
    "writing a checkpoint (rerun with --resume); 5 the machine refused (disk full, read-only file system, "
    "permissions: the file is named; fix it and rerun).";

// `sluice prep`: its options, which override the config's corpus.path, cache.dir, prep.threads
// and prep.overwrite.
struct PrepCommand {
  ConfigOptions config;
  std::string corpus, out;
  bool overwrite = false;
  int threads = -1;

  void add(CLI::App& app) {
    auto* prep = app.add_subcommand(
        "prep",
        "Prepare the feature cache: corpus -> sharded HDF5 (mels, token ids). Run under `mpirun -np N` "
        "or `srun` to split the work across ranks by audio duration; reruns keep finished shards.");
    config.attach(*prep);
    prep->footer(
        "Writes CACHE/shard-NNNNN.h5, index.h5, manifest.json (last), rejects.jsonl, prep-report.json, "
        "the effective config sluice-prep.yaml, timeline/rank-N.json and the prep report (report.md, report.json, "
        "report.html, trace.json).\nExit codes: 0 done; 1 failed (finished shards are "
        "kept: rerun to resume); 2 bad option or config, or the cache was made from other inputs "
        "(--overwrite replaces it); 3 more rejects than prep.max_reject_fraction (see rejects.jsonl); "
        "5 the disk is full or read-only (the file is named; fix it and rerun to resume).\n"
        "Corpus formats (corpus.format; auto recognises each by its files; audio: wav, flac, ogg, opus, mp3):\n"
        "  ljspeech     DIR/metadata.csv `LJ001-0001|text|normalized text` + DIR/wavs/LJ001-0001.flac\n"
        "  jsonl        FILE.jsonl `{\"id\":\"x1\",\"audio\":\"wavs/x1.wav\",\"text\":\"hi\",\"speaker\":\"s1\",\"language\":\"en\"}`\n"
        "  libritts     DIR/train-clean-100/103/1240/103_1240_000000_000000.wav + .normalized.txt (or 103_1240.trans.tsv)\n"
        "  vctk         DIR/wav48_silence_trimmed/p225/p225_001_mic1.flac + DIR/txt/p225/p225_001.txt (corpus.vctk_mic)\n"
        "  commonvoice  cv-corpus-*/fa/validated.tsv (corpus.split) + clips/common_voice_fa_19255379.mp3\n"
        "See docs/cache-format.md.");
    prep->add_option("--corpus", corpus,
                     "corpus to read (sets corpus.path): a corpus folder as downloaded (LJSpeech, LibriTTS, "
                     "VCTK, Common Voice locale folder), a Common Voice .tsv or a .jsonl manifest");
    prep->add_option("-o,--out", out, "cache directory to write (sets cache.dir)");
    prep->add_option("--threads", threads, "decode/feature threads per rank (sets prep.threads; 0 = auto)")
        ->check(non_negative());
    prep->add_flag("--overwrite", overwrite,
                   "replace an existing cache made from other settings or inputs (sets prep.overwrite)");
  }

  // Before MPI starts: the settings, and the corpus listing started on a thread of its own
  // (runtime/prep/prep_job.h, step 1). A bad config is kept for run(), which says it once MPI
  // knows which rank is rank 0.
  void start() {
    try {
      settings = config.load();
      if (!corpus.empty()) settings->set("corpus.path", corpus, "--corpus");
      if (!out.empty()) settings->set("cache.dir", out, "--out");
      if (threads >= 0) settings->set("prep.threads", std::to_string(threads), "--threads");
      if (overwrite) settings->set("prep.overwrite", "true", "--overwrite");
      listing = runtime::start_listing(*settings);
    } catch (...) {
      start_error = std::current_exception();
    }
  }

  double join_timeout_s() const { return settings ? settings->number("runtime.timeout_s") : config.timeout_s(); }

  int run(const MpiSession& session) {
    if (start_error) std::rethrow_exception(start_error);
    return runtime::run_prep(session, *settings, std::move(listing));
  }

 private:
  std::optional<config::Config> settings;
  std::future<dataset::CorpusListing> listing;
  std::exception_ptr start_error;
};

// The commands that never need other ranks, and so run without MPI: `sluice cache verify|inspect`,
// `sluice config reference|show` and `sluice report`.
struct OfflineCommands {
  CLI::App *verify = nullptr, *inspect = nullptr, *reference = nullptr, *show = nullptr, *report = nullptr;
  std::string verify_dir, inspect_dir, report_dir;
  bool inspect_json = false;
  ConfigOptions show_config;

  void add(CLI::App& app) {
    add_cache(app);
    add_config(app);
    add_report(app);
  }

  void add_cache(CLI::App& app) {
    auto* cache = app.add_subcommand("cache", "Check or summarise a finished cache");
    cache->require_subcommand(1);
    verify = cache->add_subcommand(
        "verify", "Read every chunk of every shard (fletcher32), check offsets, counts and fingerprint; "
                  "exit 1 naming each faulty shard and sample; 2 when DIR does not exist");
    verify->add_option("DIR", verify_dir, "cache directory")->required()->check(CLI::ExistingDirectory);
    inspect = cache->add_subcommand(
        "inspect", "Totals, length histograms, per-language and per-speaker counts, vocabulary coverage");
    inspect->add_option("DIR", inspect_dir, "cache directory")->required()->check(CLI::ExistingDirectory);
    inspect->add_flag("--json", inspect_json, "print JSON instead of text");
  }

  void add_config(CLI::App& app) {
    auto* config = app.add_subcommand("config", "Show the configuration schema or an effective configuration");
    config->require_subcommand(1);
    reference = config->add_subcommand("reference", "Every setting with its type, default and meaning (Markdown)");
    show = config->add_subcommand("show", "The effective configuration after the file and --set overrides (YAML)");
    show_config.attach(*show);
  }

  // `sluice report DIR`: the bottleneck report from a run's saved timelines (report/, docs/report.md).
  void add_report(CLI::App& app) {
    report = app.add_subcommand(
        "report", "Write the bottleneck report of a train run directory or a prep cache directory from its saved "
                  "per-rank timelines (report.md, report.json, report.html, trace.json) and print the verdicts");
    report->add_option("DIR", report_dir, "train.run_dir of a `sluice train` run, or a `sluice prep` cache directory")
        ->required()
        ->check(CLI::ExistingDirectory);
    report->footer("Reads DIR/timeline/rank-N.json (every rank writes one at exit, and on a failure); train or prep "
                   "is told by the timelines' job. Rules and thresholds: docs/report.md.\nExit codes: 0 written; "
                   "1 no timelines in DIR/timeline, or a malformed one (named); 2 bad option or no such DIR.");
  }

  // The chosen command's exit code, or nullopt when none of these was chosen.
  std::optional<int> run() const {
    if (*reference) {
      std::cout << "# sluice configuration reference\n" << runtime::settings_schema().reference_markdown();
      return 0;
    }
    if (*show) {
      std::cout << show_config.load().to_yaml();
      return 0;
    }
    if (*verify) {
      // 0 when the cache is sound; 1 with every fault listed (shard file, sample) otherwise.
      const cache::VerifyResult result = cache::verify_cache(verify_dir);
      std::cout << result.to_text();
      return result.ok() ? 0 : 1;
    }
    if (*inspect) {
      const cache::InspectResult result = cache::inspect_cache(inspect_dir);
      std::cout << (inspect_json ? result.to_json().dump(2) + "\n" : result.to_text());
      return 0;
    }
    if (*report) {
      std::cout << report::write_report(report_dir);
      return 0;
    }
    return std::nullopt;
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

// Parses the command line. CLI11 prints --help and --version (exit 0) and a bad command line
// with its reason (exit 2, not CLI11's own codes); nullopt when the chosen command should run.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& error) {
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
  const CLI::App* prep_command = app.get_subcommand("prep");
  if (torch == nullptr && !prep_command->parsed()) {
    // Not reached from main, which hands these commands over before parsing.
    log::get("launcher")->error("train, doctor and bench run in sluice-train, which this executable starts for them");
    return exit_usage;
  }

  if (prep_command->parsed()) prep.start();
  MpiSession session(&argc, &argv, prep_command->parsed() ? prep.join_timeout_s() : torch->join_timeout_s());
  double abort_grace_s = 1.0;  // until train reads runtime.timeout_s
  try {
    if (torch != nullptr) {
      if (const auto code = torch->run_with_mpi(session, abort_grace_s)) return *code;
    }
    return prep.run(session);
  } catch (const Error& error) {
    return end_job(session, error, abort_grace_s);
  } catch (const std::exception& error) {
    log::get("launcher")->error("internal error: {}", error.what());
    if (session.size() > 1) session.abort(exit_failure);
    return exit_failure;
  }
}

}  // namespace sluice::launcher
