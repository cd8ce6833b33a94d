#include "runtime/train/embedded_model_rank.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "common/stop_signal.h"
#include "runtime/settings.h"
#include "runtime/train/train_job.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {
namespace {

// A TCP port free on this host now (the kernel picks it); torch.distributed's store binds it
// moments later, the usual small race of a rendezvous port.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw TransportError("socket() failed while picking a rendezvous port for torch.distributed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) throw TransportError("bind() failed while picking a rendezvous port for torch.distributed");
  return ntohs(address.sin_port);
}

// The first model rank's host and a free port there, broadcast over the model ranks'
// communicator: every Python rank gets the same torch.distributed rendezvous. Loopback when
// every model rank shares that host.
std::string agree_on_rendezvous(const ModelRankParts& parts) {
  const std::vector<int>& model = parts.setup.model_ranks;
  const std::string& first_host = parts.session.host_of(model.front());
  bool one_host = true;
  for (int r : model) one_host = one_host && parts.session.host_of(r) == first_host;
  int port = parts.setup.model_index_of(parts.session.rank()) == 0 ? free_port() : 0;
  if (parts.model_comm != MPI_COMM_NULL) {
    check_mpi(MPI_Bcast(&port, 1, MPI_INT, 0, parts.model_comm), "MPI_Bcast(torch.distributed rendezvous)");
  }
  return (one_host ? std::string("127.0.0.1") : first_host) + ":" + std::to_string(port);
}

}  // namespace

EmbeddedModelRank::EmbeddedModelRank(const MpiSession& session, EmbeddedOptions options) : session_(session) {
  // SIGTERM / SIGUSR1 stop the feed at a step the model ranks agree on (batch_stream.h, STOP), as
  // they stop `sluice train`; Python's default for both would end the process at once.
  install_stop_signal_handlers();
  config::Config config = config::Config::load(settings_schema(), options.config_file, options.overrides);
  TrainOptions train;
  train.announce.kind = RankKind::python;
  train.announce.resume_step = options.resume_step;
  train.announce.own_config = options.own_config;
  train.model_side = [this](const ModelRankParts& parts) { return hand_over(parts); };
  thread_ = std::thread([this, config = std::move(config), train = std::move(train)] {
    timing::SpanRecorder::global().name_this_thread("train");
    int code = 1;
    std::exception_ptr error;
    try {
      code = run_train(session_, config, train);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    exit_code_ = code;
    run_error_ = error;
    done_ = true;
    changed_.notify_all();
  });
  wait_until([this] { return ready_ || done_; });
  if (!ready_) {
    thread_.join();
    if (run_error_) std::rethrow_exception(run_error_);
    throw Error(ErrorKind::internal, "sluice train ended before this Python rank's model side started");
  }
  timing::SpanRecorder::global().name_this_thread("python");
}

EmbeddedModelRank::~EmbeddedModelRank() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!release_) {
      script_error_ = std::make_exception_ptr(
          Error(ErrorKind::internal, "the Python script ended without closing its sluice.Feed (feed.close())"));
      release_ = true;
      changed_.notify_all();
    }
  }
  thread_.join();
}

void EmbeddedModelRank::wait_until(const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, ready);
}

nlohmann::json EmbeddedModelRank::hand_over(const ModelRankParts& parts) {
  if (parts.feed.channel == nullptr) {
    throw ConfigError("a Python model rank needs a feed: train.replay_from_memory is for sluice's C++ model loop");
  }
  auto stream = std::make_unique<BatchStream>(parts, StepSpans::script);
  ModelRankInfo info;
  info.model_index = stream->model_index();
  info.model_ranks = static_cast<int>(parts.setup.model_ranks.size());
  info.gpu = parts.settings.model_on_gpu() ? parts.setup.roles.at(parts.session.rank()).gpu : -1;
  info.rendezvous = agree_on_rendezvous(parts);
  info.first_step = parts.setup.first_step;
  info.end_step = parts.setup.end_step;
  info.steps_per_epoch = parts.setup.schedule->steps_per_epoch();
  info.data_rank = parts.feed.data_rank;
  info.vocab_size = static_cast<int>(parts.reader.manifest()["vocabulary"]["symbols"].size());
  info.n_mels = parts.reader.n_mels();
  info.transport = parts.setup.roles.transport;
  info.run_dir = parts.settings.run_dir.string();
  info.validation_every = parts.settings.validation_every;
  info.validation_samples = static_cast<int64_t>(stream->validation_samples());
  info.compute_threads = parts.context.compute_threads;
  for (size_t c = 0; c < parts.reader.corpora(); ++c) {
    info.corpora.push_back(parts.reader.corpus_dir(c).string());
    info.corpus_starts.push_back(parts.reader.first_index(c));
  }
  info.languages = parts.reader.languages();
  info.speakers = parts.reader.speakers();
  info.sample_language.reserve(parts.reader.entries().size());
  info.sample_speaker.reserve(parts.reader.entries().size());
  for (const cache::IndexEntry& entry : parts.reader.entries()) {
    info.sample_language.push_back(entry.language);
    info.sample_speaker.push_back(entry.speaker);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stream_ = std::move(stream);
    info_ = std::move(info);
    ready_ = true;
    changed_.notify_all();
  }
  wait_until([this] { return release_; });
  if (script_error_) std::rethrow_exception(script_error_);
  return stream_->summary();
}

int EmbeddedModelRank::finish() {
  stream_->close();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release_ = true;
    changed_.notify_all();
  }
  thread_.join();
  if (run_error_) std::rethrow_exception(run_error_);
  // Stopped by the agreement on a signal another rank got: the run's exit code says stopped too.
  if (exit_code_ == 0 && stream_->stopped_at() >= 0) return train_stopped;
  return exit_code_;
}

void EmbeddedModelRank::fail(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (release_) return;
    script_error_ = error;
    release_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice::runtime
