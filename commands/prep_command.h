#pragma once
// The command line of `sluice prep`: its options, which override the config's corpus.path,
// cache.dir, prep.threads and prep.overwrite, and the hand-over to the prep job
// (runtime/prep/prep_job.h).
#include <exception>
#include <future>
#include <optional>
#include <string>

#include "commands/command_options.h"
#include "dataset/corpus.h"

namespace sluice {
class MpiSession;

class PrepCommand {
 public:
  // Adds `prep` and its options to `app`.
  void add(CLI::App& app);
  bool chosen() const { return command_ != nullptr && command_->parsed(); }
  // Before MPI starts: the settings, and the corpus listing started on a thread of its own
  // (runtime/prep/prep_job.h, step 1). A bad config is kept for run(), which says it once MPI
  // knows which rank is rank 0.
  void start();
  // runtime.timeout_s of the settings (its default when they did not load).
  double join_timeout_s() const;
  // The prep job's exit code; rethrows start()'s error.
  int run(const MpiSession& session);

 private:
  CLI::App* command_ = nullptr;
  ConfigOptions config_;
  std::string corpus_, out_;
  bool overwrite_ = false;
  int threads_ = -1;
  std::optional<config::Config> settings_;
  std::future<dataset::CorpusListing> listing_;
  std::exception_ptr start_error_;
};

}  // namespace sluice
