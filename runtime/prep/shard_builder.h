#pragma once
// One rank's share of `sluice prep`: turns the corpus rows of its shards into shard files.
//
// Threads: `threads` decode/feature workers and one writer (HDF5 is serialised by a global lock,
// so one thread does all HDF5 work while the workers decode, normalise, tokenize and compute
// mels). Workers may run at most `window` items ahead of the writer, which bounds memory to
// window finished items. The writer appends items in row order, so a shard's content never
// depends on thread timing.
//
// Shards arrive while it runs (add(), from the plan's first shard and then rank 0's
// ShardDispenser) until close(). An intake thread takes each in: a shard already complete from an
// earlier run is verified and kept there, off the main thread, whose MPI polling and heartbeats
// must not wait on a shard's checksums; the others' rows go to the workers.
//
// The calling (main) thread only starts the builder, adds shards, polls progress() and calls
// finish(); it is free to do MPI meanwhile (MPI is used by the main thread only).
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/shard_writer.h"
#include "dataset/corpus.h"
#include "dataset/mel.h"
#include "dataset/text_normalizer.h"
#include "dataset/vocabulary.h"
#include "runtime/prep/prep_plan.h"
#include "timing/injected_delay.h"

namespace sluice::runtime {

struct BuildSettings {
  dataset::MelConfig mel;
  dataset::TextConfig text;
  std::string tokenizer = "chars";  // chars | phonemes
  double min_seconds = 0.0;
  double max_seconds = 1e9;
  int64_t max_tokens = 1000000;             // prep.max_tokens
  double max_tokens_per_second = 1e9;       // prep.max_tokens_per_second
  std::filesystem::path cache_dir;
  cache::ShardWriterOptions writer;
  int threads = 1;
  int rank = 0;                 // for injected delays
  timing::InjectedDelay delay;  // debug.delay_*: off by default
};

// Live counters, written by the builder's threads and read by the main thread at any time.
struct BuildProgress {
  std::atomic<int64_t> items{0};      // rows finished (kept shards count at once)
  std::atomic<int64_t> rejects{0};
  std::atomic<int64_t> audio_ms{0};   // audio of finished rows, by the probed duration
  std::atomic<int64_t> total_items{0};     // of the shards added so far (they come as the job runs)
  std::atomic<int64_t> total_audio_ms{0};
};

// Where the rank's time went, summed over threads (seconds of thread time).
struct StageSeconds {
  double decode = 0;    // read + decode + downmix + resample
  double text = 0;      // normalise + detect language + tokenize
  double features = 0;  // log-mel
  double write = 0;     // HDF5 appends and commits (writer thread)
};

// The CPU time of the builder's threads (CLOCK_THREAD_CPUTIME_ID, read once as each ends), beside
// the stages' wall time: what the workers (decode, text, mel) and the writer cost, whatever else
// ran on the cores meanwhile. The rest of a rank's CPU is its main thread's and the intake's.
struct ThreadCpuSeconds {
  double workers = 0;  // summed over the worker threads
  double writer = 0;
};

// What the rank's one writer put through: the report compares its busy time with its CPU time
// (report/prep_analysis.cpp, the write_bound rule), so that a writer waiting for storage and one
// out of CPU are told apart, and the storage's rate can be given.
struct WriterLoad {
  int workers = 0;          // the worker threads it served
  int64_t mel_bytes = 0;    // /mel bytes written (frames x n_mels x ShardWriterOptions::mel_value_bytes())
};

struct ShardOutcome {
  int64_t shard = 0;
  bool kept = false;  // complete from an earlier run with the same fingerprint
  int64_t samples = 0;
  int64_t rejects = 0;
};

struct BuildResult {
  std::vector<ShardOutcome> shards;
  int64_t samples = 0;
  int64_t rejects = 0;
  int64_t frames = 0;
  double audio_seconds = 0;  // of the samples written in this run
  std::map<std::string, int64_t> reject_reasons;
  dataset::UnknownCounts unknown;
  StageSeconds stages;
  ThreadCpuSeconds cpu;
  WriterLoad writer;
  double wall_seconds = 0;
  std::exception_ptr error;  // set when the rank failed; no shard of it was left half written
};

class ShardBuilder {
 public:
  ShardBuilder(const dataset::CorpusListing& listing, const PrepPlan& plan, BuildSettings settings,
               const dataset::Vocabulary& vocabulary);
  ~ShardBuilder();  // stops and joins the threads if finish() was not called
  ShardBuilder(const ShardBuilder&) = delete;
  ShardBuilder& operator=(const ShardBuilder&) = delete;

  // Starts the threads; returns at once. They work on the shards add() gives them.
  void start();
  // One more shard to write (or to keep, when complete from an earlier run); returns at once.
  void add(int64_t shard);
  // No shard will be added any more: the threads end once the shards they have are written.
  void close();
  // Shards added but not yet begun by the workers.
  int64_t shards_ahead() const;
  // The work added and not yet written, in seconds at the rate this builder has written rows so
  // far; infinity before its first row is written (no rate yet).
  double seconds_ahead() const;
  // Every thread has ended: all shards written and close() called, or a failure.
  bool done() const;
  // Waits for the threads and returns what happened; call once.
  BuildResult finish();
  const BuildProgress& progress() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::runtime
