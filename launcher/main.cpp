// sluice: one executable, one subcommand per job. This file parses the command line, starts MPI
// and hands over to runtime/; it holds no logic of its own.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "common/stop_signal.h"
#include "commands/cache_commands.h"
#include "runtime/prep/prep_job.h"
#include "runtime/settings.h"
#include "runtime/train/train_job.h"
#include "report/write_report.h"
#include "commands/tuning_commands.h"

namespace {

constexpr int exit_usage = 2;

// Options every job shares: the config file and --set overrides.
struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;

  void attach(CLI::App& command) {
    command.add_option("-c,--config", file, "YAML config file; every key is optional (see `sluice config reference`)")
        ->check(CLI::ExistingFile);
    command.add_option("--set", overrides,
                       "override one setting, e.g. --set features.n_mels=100 (repeatable; applied after the file)")
        ->type_name("KEY=VALUE");
  }

  sluice::config::Config load() const {
    return sluice::config::Config::load(sluice::runtime::settings_schema(), file, overrides);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sluice keeps training GPUs fed: an offline cache of mel features and token ids in sharded "
      "HDF5, prepared in parallel under mpirun/srun or in one process."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");

  ConfigOptions prep_config;
  std::string prep_corpus, prep_out;
  bool prep_overwrite = false;
  int prep_threads = -1;
  auto* prep = app.add_subcommand(
      "prep",
      "Prepare the feature cache: corpus -> sharded HDF5 (mels, token ids). Run under `mpirun -np N` "
      "or `srun` to split the work across ranks by audio duration; reruns keep finished shards.");
  prep_config.attach(*prep);
  prep->footer(
      "Writes CACHE/shard-NNNNN.h5, index.h5, manifest.json (last), rejects.jsonl, prep-report.json, "
      "the effective config sluice-prep.yaml, timeline/rank-N.json and the prep report (report.md, report.json, "
      "report.html, trace.json).\nExit codes: 0 done; 1 failed (finished shards are "
      "kept: rerun to resume); 2 bad option or config, or the cache was made from other inputs "
      "(--overwrite replaces it); 3 more rejects than prep.max_reject_fraction (see rejects.jsonl).\n"
      "Corpus formats (corpus.format; auto recognises each by its files; audio: wav, flac, ogg, opus, mp3):\n"
      "  ljspeech     DIR/metadata.csv `LJ001-0001|text|normalized text` + DIR/wavs/LJ001-0001.flac\n"
      "  jsonl        FILE.jsonl `{\"id\":\"x1\",\"audio\":\"wavs/x1.wav\",\"text\":\"hi\",\"speaker\":\"s1\",\"language\":\"en\"}`\n"
      "  libritts     DIR/train-clean-100/103/1240/103_1240_000000_000000.wav + .normalized.txt (or 103_1240.trans.tsv)\n"
      "  vctk         DIR/wav48_silence_trimmed/p225/p225_001_mic1.flac + DIR/txt/p225/p225_001.txt (corpus.vctk_mic)\n"
      "  commonvoice  cv-corpus-*/fa/validated.tsv (corpus.split) + clips/common_voice_fa_19255379.mp3\n"
      "See docs/cache-format.md.");
  prep->add_option("--corpus", prep_corpus,
                   "corpus to read (sets corpus.path): a corpus folder as downloaded (LJSpeech, LibriTTS, "
                   "VCTK, Common Voice locale folder), a Common Voice .tsv or a .jsonl manifest");
  prep->add_option("-o,--out", prep_out, "cache directory to write (sets cache.dir)");
  prep->add_option("--threads", prep_threads, "decode/feature threads per rank (sets prep.threads; 0 = auto)");
  prep->add_flag("--overwrite", prep_overwrite,
                 "replace an existing cache made from other settings or inputs (sets prep.overwrite)");

  ConfigOptions train_config;
  std::string train_cache, train_run_dir;
  long long train_steps = -1;
  bool train_resume = false;
  auto* train = app.add_subcommand(
      "train",
      "Train on a prepared cache. Under `mpirun -np N` / `srun` every rank gets a role: data ranks "
      "read the cache and feed batches to model ranks, model ranks train with data parallelism. "
      "One process (no mpirun) feeds itself from a thread.");
  train_config.attach(*train);
  train->add_option("--cache", train_cache, "cache directory made by `sluice prep` (sets cache.dir)");
  train->add_option("--run-dir", train_run_dir, "run directory for checkpoints and timings (sets train.run_dir)");
  train->add_option("--steps", train_steps, "global steps to train (sets train.steps)");
  train->add_flag("--resume", train_resume,
                  "continue from RUN_DIR/checkpoints/latest.json with the next unseen batch");
  train->footer("Writes RUN_DIR/checkpoints/, RUN_DIR/ranks/rank-N.json, RUN_DIR/timeline/rank-N.json (every stage of "
                "every rank) and, from rank 0 at the end, the bottleneck report: report.md, report.json, report.html, "
                "trace.json (`sluice report RUN_DIR` rewrites it offline).\n"
                "Exit codes: 0 done; 1 failed (a rank, its host and what it waited for are named); "
                "2 bad option or config; 4 stopped by SIGTERM/SIGUSR1 after writing a checkpoint "
                "(rerun with --resume).");

  auto* cache = app.add_subcommand("cache", "Check or summarise a finished cache");
  cache->require_subcommand(1);
  std::string verify_dir, inspect_dir;
  bool inspect_json = false;
  auto* verify = cache->add_subcommand(
      "verify", "Read every chunk of every shard (fletcher32), check offsets, counts and fingerprint; "
                "exit 1 naming each faulty shard and sample");
  verify->add_option("DIR", verify_dir, "cache directory")->required()->check(CLI::ExistingDirectory);
  auto* inspect = cache->add_subcommand(
      "inspect", "Totals, length histograms, per-language and per-speaker counts, vocabulary coverage");
  inspect->add_option("DIR", inspect_dir, "cache directory")->required()->check(CLI::ExistingDirectory);
  inspect->add_flag("--json", inspect_json, "print JSON instead of text");

  auto* config = app.add_subcommand("config", "Show the configuration schema or an effective configuration");
  config->require_subcommand(1);
  auto* reference = config->add_subcommand("reference", "Every setting with its type, default and meaning (Markdown)");
  ConfigOptions show_config;
  auto* show = config->add_subcommand("show", "The effective configuration after the file and --set overrides (YAML)");
  show_config.attach(*show);

  // `sluice report DIR`: the bottleneck report from a run's saved timelines (report/, docs/report.md).
  std::string report_dir;
  auto* report_command = app.add_subcommand(
      "report", "Write the bottleneck report of a train run directory or a prep cache directory from its saved "
                "per-rank timelines (report.md, report.json, report.html, trace.json) and print the verdicts");
  report_command->add_option("DIR", report_dir, "train.run_dir of a `sluice train` run, or a `sluice prep` cache directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  report_command->footer("Reads DIR/timeline/rank-N.json (every rank writes one at exit, and on a failure); train or prep "
                         "is told by the timelines' job. Rules and thresholds: docs/report.md.\nExit codes: 0 written; "
                         "1 no timelines in DIR/timeline, or a malformed one (named).");

  // `sluice doctor` and `sluice bench ...` (commands/tuning_commands.cpp).
  sluice::TuningCommands tuning(app);

  CLI11_PARSE(app, argc, argv);

  // Commands that never need other ranks run without MPI.
  try {
    if (*reference) {
      std::cout << "# sluice configuration reference\n"
                << sluice::runtime::settings_schema().reference_markdown();
      return 0;
    }
    if (*show) {
      std::cout << show_config.load().to_yaml();
      return 0;
    }
    if (*verify) return sluice::runtime::run_cache_verify(verify_dir);
    if (*inspect) return sluice::runtime::run_cache_inspect(inspect_dir, inspect_json);
    if (*report_command) {
      std::cout << sluice::report::write_report(report_dir);
      return 0;
    }
    if (const auto code = tuning.run_without_mpi()) return *code;
  } catch (const sluice::Error& error) {
    sluice::log::get("launcher")->error("{}: {}", sluice::to_string(error.kind()), error.what());
    return error.kind() == sluice::ErrorKind::config ? exit_usage : 1;
  }

  sluice::MpiSession session(&argc, &argv);
  // Before MPI_Abort after a transport error, the failing rank waits this long so that the other
  // ranks waiting on the same dead peer reach their own deadlines and say so too.
  double abort_grace_s = 1.0;
  try {
    if (const auto code = tuning.run_with_mpi(session)) return *code;
    if (*train) {
      sluice::install_stop_signal_handlers();
      auto settings = train_config.load();
      abort_grace_s = std::min(1.0, 0.25 * settings.number("runtime.timeout_s"));
      if (!train_cache.empty()) settings.set("cache.dir", train_cache, "--cache");
      if (!train_run_dir.empty()) settings.set("train.run_dir", train_run_dir, "--run-dir");
      if (train_steps >= 0) settings.set("train.steps", std::to_string(train_steps), "--steps");
      return sluice::runtime::run_train(session, settings, {train_resume});
    }
    auto settings = prep_config.load();
    if (!prep_corpus.empty()) settings.set("corpus.path", prep_corpus, "--corpus");
    if (!prep_out.empty()) settings.set("cache.dir", prep_out, "--out");
    if (prep_threads >= 0) settings.set("prep.threads", std::to_string(prep_threads), "--threads");
    if (prep_overwrite) settings.set("prep.overwrite", "true", "--overwrite");
    return sluice::runtime::run_prep(session, settings);
  } catch (const sluice::Error& error) {
    // A config error is the same on every rank: rank 0 says it once. Anything else is said by
    // the rank that saw it, and the job is ended so that no other rank waits for this one.
    if (error.kind() != sluice::ErrorKind::config || session.rank() == 0) {
      sluice::log::get("launcher")->error("{}: {}", sluice::to_string(error.kind()), error.what());
    }
    if (session.size() > 1 && error.kind() != sluice::ErrorKind::config) {
      if (error.kind() == sluice::ErrorKind::transport) {
        sluice::log::get("launcher")->flush();
        std::this_thread::sleep_for(std::chrono::duration<double>(abort_grace_s));
      }
      session.abort(1);
    }
    return error.kind() == sluice::ErrorKind::config ? exit_usage : 1;
  } catch (const std::exception& error) {
    sluice::log::get("launcher")->error("internal error: {}", error.what());
    if (session.size() > 1) session.abort(1);
    return 1;
  }
}
