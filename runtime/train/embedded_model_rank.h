#pragma once
// `sluice train` inside another program's process: the model rank of a Python training script
// (python/: sluice.Feed(); docs/python.md). The process is a real MPI rank of the job; it runs
// the same run_train as a sluice process, with the same start-up collectives in the same order
// (job_agreement.h first), and only its model side differs: instead of the C++ model loop, the
// script pulls batches from a BatchStream.
//
// Threads. run_train runs on a thread of its own ("train"). When it reaches this rank's model
// side it makes the stream, agrees with the other model ranks on a torch.distributed rendezvous
// address and hands the stream over to the script's thread, then waits: the script's thread
// calls next() on the stream (it makes the feed's MPI calls, under MPI_THREAD_MULTIPLE) until
// finish(). Then run_train goes on as on any rank: the finish line, the timelines, and on rank 0
// the report. An error on the script's thread (fail()) ends the model side with that error, so
// the rank's timeline says what failed and whom it waited for.
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_session.h"
#include "runtime/train/batch_stream.h"

namespace sluice::runtime {

struct EmbeddedOptions {
  // The script's own config (empty: rank 0's; required in a one-process run), with overrides.
  std::filesystem::path config_file;
  std::vector<std::string> overrides;
  bool own_config = false;
  int64_t resume_step = -1;  // -1: from the start
};

// What a script needs to set up its model and torch.distributed.
struct ModelRankInfo {
  int model_index = 0;      // this rank among the model ranks (torch.distributed's rank)
  int model_ranks = 1;      // torch.distributed's world size
  int gpu = -1;             // the rank's GPU (model.device cuda), -1: CPU
  std::string rendezvous;   // "HOST:PORT" on the first model rank, free when agreed
  int64_t first_step = 0, end_step = 0, steps_per_epoch = 0;
  int data_rank = -1;
  int vocab_size = 0;       // token ids are 0 (padding) .. vocab_size - 1
  int n_mels = 0;
  std::string transport;
  std::string run_dir;
  int64_t validation_every = 0;    // train.validation_every (0: only at the end)
  int64_t validation_samples = 0;  // this rank's share of the validation split
  int compute_threads = 1;         // this rank's share of the node's cores (RankContext)
  // The caches the run trains on (train.mixture's, or cache.dir alone) and where each one's cache
  // indices begin: a batch's indices say which corpus each sample is from.
  std::vector<std::string> corpora;
  std::vector<int64_t> corpus_starts;
  // The run's languages and speakers (unified over a mixture's caches, cache/cache_reader.h) and
  // each cache index's position in them: what a multilingual, multi-speaker model embeds.
  std::vector<std::string> languages, speakers;
  std::vector<uint16_t> sample_language;
  std::vector<uint32_t> sample_speaker;
};

class EmbeddedModelRank {
 public:
  // Starts run_train on its thread and returns once the stream is ready, or throws the error
  // that ended the start-up (a bad config or cache: the same message a sluice rank prints).
  EmbeddedModelRank(const MpiSession& session, EmbeddedOptions options);
  // Joins the thread; a model side still waiting is ended with an error first. Never throws.
  ~EmbeddedModelRank();
  EmbeddedModelRank(const EmbeddedModelRank&) = delete;
  EmbeddedModelRank& operator=(const EmbeddedModelRank&) = delete;

  BatchStream& stream() { return *stream_; }
  const ModelRankInfo& info() const { return info_; }
  // Ends the model side and waits for the end of run_train (on rank 0 the report is written);
  // throws the run's error. Returns run_train's exit code.
  int finish();
  // Ends the model side with `error` (raised on the script's thread); run_train writes the
  // failed timeline. Returns once it has.
  void fail(std::exception_ptr error) noexcept;
  bool finished() const { return done_; }

 private:
  nlohmann::json hand_over(const ModelRankParts& parts);
  void wait_until(const std::function<bool()>& ready);

  const MpiSession& session_;
  std::unique_ptr<BatchStream> stream_;
  ModelRankInfo info_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool ready_ = false;     // the stream is handed over
  bool release_ = false;   // the script is done (finish() or fail())
  bool done_ = false;      // run_train returned or threw
  int exit_code_ = 0;
  std::exception_ptr script_error_, run_error_;
};

}  // namespace sluice::runtime
