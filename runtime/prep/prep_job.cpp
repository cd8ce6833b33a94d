#include "runtime/prep/prep_job.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/address_space.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file_lock.h"
#include "common/file_util.h"
#include "common/host.h"
#include "common/log.h"
#include "common/slurm_env.h"
#include "dataset/vocabulary.h"
#include "runtime/prep/coordinator.h"
#include "runtime/prep/listing_share.h"
#include "runtime/prep/plan_agreement.h"
#include "runtime/prep/prep_protocol.h"
#include "runtime/prep/prep_settings.h"
#include "runtime/prep/shard_builder.h"
#include "runtime/rank_timing.h"
#include "runtime/settings.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

// The builder's threads on this rank: prep.threads, or by default the cores this rank may use
// (when ranks share a node unbound, a share of them). Warns once a node when the binding leaves
// fewer cores than threads.
int worker_threads(const MpiSession& session, int64_t requested) {
  const int cores = usable_cores();
  const int share = cores >= static_cast<int>(std::thread::hardware_concurrency()) ? cores / session.local_size() : cores;
  const int threads = requested > 0 ? static_cast<int>(requested) : std::max(1, share);
  const std::string warning = binding_warning(threads + 1);
  if (!warning.empty() && session.local_rank() == 0) {  // the same on every rank of the node
    logger()->warn("{} (prep: {} worker(s) + 1 writer)", warning, threads);
  }
  return threads;
}

// What a prep rank needs of address space (common/address_space.h). Measured (VmPeak of `sluice
// prep` on the sample corpus, one rank): 469 MB with 1 thread, 603 with 2, 747 with 4, 1,036 with 8,
// so ~330 MB and ~90 MB a thread (glibc's malloc arena per thread is most of it); under limits
// between 250 and 400 MB it crashed in HDF5 and libsoxr, or passed, by chance. Half as much again
// on top, for longer clips than the sample corpus's and the node's MPI.
AddressSpaceNeed prep_address_space_need(int threads) {
  return {(330 + 90 * static_cast<uint64_t>(threads)) * megabytes * 3 / 2,
          "prep with " + std::to_string(threads) + " thread(s)", "prep.threads (--threads)"};
}

// What prep is about to read: the format (and what `auto` recognised it by), the rows, and a few
// of the corpus notes (duplicate audio files, language decisions) with the count of the rest.
void log_listing(const dataset::CorpusListing& listing, int ranks, int threads) {
  logger()->info("corpus {} ({}, recognised by {}): {} rows; {} rank(s) x {} thread(s)",
                 listing.listing_file.string(), listing.format, listing.recognised, listing.items.size(),
                 ranks, threads);
  for (size_t i = 0; i < std::min<size_t>(listing.notes.size(), 5); ++i) logger()->info("corpus: {}", listing.notes[i]);
  if (listing.notes.size() > 5) logger()->info("corpus: {} more note(s) of this kind", listing.notes.size() - 5);
}

// Rank 0: the cache directory's prep lock (common/file_lock.h), or why it cannot be had
// ("another prep holds this cache (pid N on host H since T) ...").
std::string take_lock(const fs::path& dir, std::optional<FileLock>& lock) {
  const fs::path path = dir / "prep.lock";
  lock.emplace(path, ErrorKind::cache);
  if (lock->held()) return "";
  const std::string refusal = "another prep holds this cache (" + lock->holder() + "): " + path.string() +
                              " is locked. Wait for that prep to finish (or stop it), or write to another --out; "
                              "a prep that died releases the lock by itself";
  lock.reset();
  return refusal;
}

// Rank 0: the cache directory, created when missing; a file system that refuses is an
// EnvironmentError naming it.
void create_cache_dir(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw_file_error(error.value(), "create the cache directory", dir.string(), ErrorKind::cache);
}

// Timing: spans of every stage on every rank, clocks aligned to rank 0's (docs/report.md).
timing::RankTimeline prep_timeline(const MpiSession& session, const PrepSettings& settings, int threads) {
  timing::RankTimeline identity;
  identity.job = "prep";
  identity.rank = session.rank();
  identity.world_size = session.size();
  identity.host = session.host();
  identity.role = "prep";
  identity.settings = {{"cache.shard_size", settings.shard_size}, {"prep.threads", threads},
                       {"runtime.timeout_s", settings.timeout_s},
                       {"prep.max_reject_fraction", settings.max_reject_fraction}};
  return identity;
}

// The timeline's end of a job that ran to its outcome: why it stopped, when it did not finish.
// Too many rejects is a stop on purpose, not a failure: the report says why and points at the
// rejects. A failure is no hang either: rank 0's timeline says which rank failed and on what.
void write_outcome(RankTiming& rank_timing, const fs::path& dir, int outcome,
                   const std::optional<PrepFailure>& failure) {
  json stop = json::object();
  if (outcome == prep_too_many_rejects) {
    stop = {{"stop_reason", "too_many_rejects"}, {"rejects_file", (dir / "rejects.jsonl").string()}};
  } else if (outcome == prep_environment || outcome == prep_failed) {
    stop = failure ? failure->timeline_summary()
                   : json{{"stop_reason", outcome == prep_environment ? "environment_error" : "failed"}};
  }
  rank_timing.write_finished(dir, outcome == prep_ok ? "finished" : outcome == prep_too_many_rejects ? "stopped" : "failed",
                             stop, tag_timeline);
}

}  // namespace

namespace {

// The corpus listing read on a thread of its own. The options are taken here, on every rank: a bad
// corpus option is a config error every rank says alike.
std::future<dataset::CorpusListing> read_listing_async(const config::Config& config) {
  return std::async(std::launch::async, [path = config.string("corpus.path"), options = corpus_options(config)] {
    return dataset::read_corpus(path, options);
  });
}

}  // namespace

std::future<dataset::CorpusListing> start_listing(const config::Config& config) {
  // Only rank 0 reads (runtime/prep/listing_share.h); a launcher that does not say which rank
  // this is (a singleton, or an unknown one) reads everywhere, and the ranks other than 0 drop it.
  const std::optional<int> rank = rank_before_mpi();
  if (rank && *rank != 0) {
    // The same settings read as rank 0 reads them, so that a bad one fails every rank alike.
    (void)config.string("corpus.path");
    (void)corpus_options(config);
    return {};
  }
  return read_listing_async(config);
}

int run_prep(const MpiSession& session, const config::Config& config,
             std::future<dataset::CorpusListing> listing_being_read) {
  const auto started = Clock::now();
  PrepSettings settings = PrepSettings::read(config);
  check_slurm_topology(session, settings.timeout_s);  // Slurm's view of tasks and nodes must match MPI's
  const fs::path& dir = settings.cache_dir;
  settings.build.threads = worker_threads(session, settings.threads);
  require_address_space(prep_address_space_need(settings.build.threads));  // the same on every rank of a node
  const dataset::Vocabulary vocabulary = settings.build.tokenizer == "phonemes"
                                             ? dataset::Vocabulary::builtin_phonemes()
                                             : dataset::Vocabulary::builtin_characters();
  const json vocabulary_json = vocabulary.to_json();

  // 1. The listing: rank 0 reads it (started before MPI) and shares it, or its error.
  if (session.rank() == 0 && !listing_being_read.valid()) {
    // The launcher's environment named another rank 0 than MPI did: read here.
    listing_being_read = read_listing_async(config);
  }
  const dataset::CorpusListing listing = share_listing(session, std::move(listing_being_read), settings.timeout_s);
  if (listing.items.empty()) {
    // The same on every rank: rank 0 says it, each stops (no exchange has started yet).
    DataError error("the corpus " + listing.listing_file.string() + " (" + listing.format +
                    ") has no samples: there is nothing to prepare. Check that file (is it empty?) and "
                    "corpus.path / corpus.format");
    error.mark_on_every_rank();
    throw error;
  }
  settings.output["corpus"]["layout"] = listing.format;  // what `auto` decided; `cache inspect` shows it
  // Rank 0 holds the directory's lock to the end of the job, before anything in it is read or
  // removed (a second prep would delete the first one's temporaries).
  std::optional<FileLock> lock;
  std::string lock_refusal;
  if (session.rank() == 0) {
    log_listing(listing, session.size(), settings.build.threads);
    create_cache_dir(dir);
    lock_refusal = take_lock(dir, lock);
  }

  // 2-3. Probe, plan, broadcast.
  const PlanAgreement agreement = agree_on_plan(session, settings, listing, vocabulary_json, lock_refusal);
  if (!agreement.plan) return agreement.refusal_code;
  const PrepPlan& plan = *agreement.plan;

  // 4. The shards: this rank's first one from the plan, the rest from rank 0 as it asks.
  RankTiming rank_timing(session, config, prep_timeline(session, settings, settings.build.threads));
  settings.build.rank = session.rank();
  settings.build.delay = rank_timing.delay();
  ShardBuilder builder(listing, plan, settings.build, vocabulary);
  builder.start();
  if (const auto first = plan.first_shard(session.rank())) builder.add(*first);

  // 5. The results, the cache's metadata (rank 0) and the outcome, the same on every rank.
  int outcome = prep_ok;
  std::optional<PrepFailure> failure;
  try {
    outcome = session.rank() == 0
                  ? coordinate(session, settings, config, builder, plan, vocabulary_json, started, failure)
                  : follow(session, settings, builder);
  } catch (const Error& error) {
    rank_timing.write_failed(dir, error.what(), -1, json::object());
    throw;
  }
  write_outcome(rank_timing, dir, outcome, failure);
  return outcome;
}

}  // namespace sluice::runtime
