#include "common/mpi_session.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "common/error.h"
#include "common/heartbeat.h"
#include "common/host.h"
#include "common/log.h"
#include "common/poll_backoff.h"

namespace sluice {
namespace {

// SLUICE_HEARTBEAT: on (default), off (MULTIPLE, no heartbeat), serialized (MPI_THREAD_SERIALIZED,
// no heartbeat: sluice before the heartbeat). A measuring aid, see MpiSession.
std::string heartbeat_mode() {
  const char* value = std::getenv("SLUICE_HEARTBEAT");
  const std::string mode = value == nullptr || *value == '\0' ? "on" : value;
  if (mode != "on" && mode != "off" && mode != "serialized") {
    throw ConfigError("SLUICE_HEARTBEAT=" + mode + " is not one of on, off, serialized; unset it");
  }
  return mode;
}

// This rank's number before MPI knows it, from the launcher's environment ("rank 3"), or "this rank".
std::string describe_rank_before_mpi() {
  const std::optional<int> rank = rank_before_mpi();
  return rank ? "rank " + std::to_string(*rank) : std::string("this rank");
}

// Ends the process when the job's ranks have not all started by the deadline (MpiSession's
// constructor says why); disarmed when it goes.
class JoinWatchdog {
 public:
  explicit JoinWatchdog(double seconds) : thread_([this, seconds] { watch(seconds); }) {}
  ~JoinWatchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      joined_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  JoinWatchdog(const JoinWatchdog&) = delete;
  JoinWatchdog& operator=(const JoinWatchdog&) = delete;

 private:
  void watch(double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (changed_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return joined_; })) return;
    log::get("runtime")->error(
        "{}: the job's ranks have not all started after {:g} s (MPI_Init waits for every one): a rank never "
        "joined. In an MPMD launch (`mpirun ... : -np N python3 train.py`) a Python rank that exited or failed "
        "before `import sluice` does this: its own output above says why. Ending this rank (exit 1); mpirun "
        "ends the others",
        describe_rank_before_mpi(), seconds);
    log::get("runtime")->flush();
    std::_Exit(1);
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool joined_ = false;
  std::thread thread_;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv, double join_timeout_s) {
  const JoinWatchdog watchdog(join_timeout_s);
  int initialised = 0;
  check_mpi(MPI_Initialized(&initialised), "MPI_Initialized");
  const std::string mode = heartbeat_mode();
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    // MULTIPLE: the heartbeat thread calls MPI at any time. (Without it, SERIALIZED would do: on
    // a CUDA trainer the gradient hooks that start each bucket's all-reduce run on torch's
    // autograd thread while the main thread waits in backward(), never at the same time.)
    const int wanted = mode == "serialized" ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
    check_mpi(MPI_Init_thread(argc, argv, wanted, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  // Errors come back as codes so that check_mpi() can turn them into exceptions with context.
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size(MPI_COMM_WORLD)");

  constexpr int host_chars = 64;
  std::string mine = host_name();
  mine.resize(host_chars, '\0');
  std::vector<char> all(static_cast<size_t>(host_chars) * static_cast<size_t>(size_));
  check_mpi(MPI_Allgather(mine.data(), host_chars, MPI_CHAR, all.data(), host_chars, MPI_CHAR,
                      MPI_COMM_WORLD),
        "MPI_Allgather(host names)");
  for (int r = 0; r < size_; ++r) {
    hosts_.emplace_back(all.data() + static_cast<size_t>(r) * host_chars);
  }
  {
    const MpiCommunicator node = MpiCommunicator::split_by_node(MPI_COMM_WORLD, rank_, "this node's ranks");
    local_rank_ = node.rank();
    local_size_ = node.size();
  }
  log::set_identity(rank_, host());
  const bool beat = mode == "on" && provided >= MPI_THREAD_MULTIPLE && size_ > 1;
  if (mode == "on" && provided < MPI_THREAD_MULTIPLE && size_ > 1) {
    log::get("runtime")->warn("MPI provides thread level {} below MPI_THREAD_MULTIPLE: no heartbeat, so every wait "
                              "across ranks is a plain deadline of runtime.timeout_s (a slow step can fail the run)",
                              provided);
  }
  heartbeat_ = std::make_unique<Heartbeat>(MPI_COMM_WORLD, hosts_, beat);
}

void MpiSession::limit_heartbeat(std::vector<int> peers) const {
  if (heartbeat_) heartbeat_->watch_only(std::move(peers));
}

const Heartbeat* MpiSession::heartbeat(double timeout_s) const {
  if (!heartbeat_) return nullptr;
  heartbeat_->start(timeout_s);
  return heartbeat_->running() ? heartbeat_.get() : nullptr;
}

MpiSession::~MpiSession() {
  if (owns_mpi_) meet_before_finalize();
  heartbeat_.reset();  // its thread makes MPI calls: stopped before MPI_Finalize
  if (owns_mpi_) {
    int finalised = 0;
    if (check_mpi_or_warn(MPI_Finalized(&finalised), "MPI_Finalized") && !finalised) {
      check_mpi_or_warn(MPI_Finalize(), "MPI_Finalize");
    }
  }
}

void MpiSession::meet_before_finalize() noexcept {
  if (!heartbeat_ || !heartbeat_->running() || size_ < 2) return;
  int finalised = 0;
  if (!check_mpi_or_warn(MPI_Finalized(&finalised), "MPI_Finalized") || finalised) return;
  try {
    MPI_Request barrier = MPI_REQUEST_NULL;
    if (!check_mpi_or_warn(MPI_Ibarrier(MPI_COMM_WORLD, &barrier), "MPI_Ibarrier(before MPI_Finalize)")) return;
    std::vector<int> everyone;
    for (int r = 0; r < size_; ++r) everyone.push_back(r);
    const double timeout_s = heartbeat_->timeout_s();
    PollBackoff backoff(std::chrono::milliseconds(50));
    while (true) {
      int done = 0;
      if (!check_mpi_or_warn(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test(barrier before MPI_Finalize)")) {
        return;
      }
      if (done) return;
      // A collective request cannot be freed or cancelled: MPI_Finalize follows with it pending.
      if (const int lost = heartbeat_->first_lost(everyone, timeout_s); lost >= 0) {
        log::get("runtime")->warn("not waiting any longer for the other ranks to finish: {}",
                                  heartbeat_->describe_loss(lost, timeout_s));
        return;
      }
      backoff.pause();
    }
  } catch (...) {
    // Logging failed: MPI_Finalize follows regardless.
  }
}

std::string describe_rank(int rank, const std::vector<std::string>& hosts) {
  if (rank < 0 || rank >= static_cast<int>(hosts.size())) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(rank) + " (host " + hosts[static_cast<size_t>(rank)] + ")";
}

std::string MpiSession::describe(int rank) const { return describe_rank(rank, hosts_); }

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest.
}

void MpiSession::announce_failure(int code) const {
  if (heartbeat_) heartbeat_->announce_failure(code);
}

bool MpiSession::heartbeat_running() const { return heartbeat_ && heartbeat_->running(); }

double MpiSession::heartbeat_interval_s() const { return heartbeat_running() ? heartbeat_->interval_s() : 0.0; }

std::optional<MpiSession::Failure> MpiSession::first_failure(double wait_s) const {
  if (!heartbeat_running()) return std::nullopt;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  while (true) {
    const auto [rank, code] = heartbeat_->first_failure();
    if (rank >= 0) return Failure{rank, code};
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}


namespace {
// An MPI count is an int: a message of 2 GiB or more would be cut (or negative), so it is refused
// here, naming it, instead. What can grow that large (the corpus listing) travels in chunks
// (runtime/prep/listing_share.h).
int message_count(const std::string& payload, const std::string& what) {
  if (payload.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorKind::internal, what + " is " + std::to_string(payload.size()) +
                                         " bytes, more than one MPI message holds (2 GiB): report this as a bug");
  }
  return static_cast<int>(payload.size());
}
}  // namespace

void send_string(const MpiSession& session, int destination, int tag, const std::string& payload,
                 Deadline deadline, const std::string& what) {
  MPI_Request request;
  check_mpi(MPI_Isend(payload.data(), message_count(payload, what), MPI_CHAR, destination, tag,
                  session.world(), &request),
        "MPI_Isend");
  int done = 0;
  PollBackoff backoff;
  while (true) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      check_mpi_or_warn(MPI_Cancel(&request), "MPI_Cancel(a send past its deadline)");
      throw TransportError("timed out sending " + what + " to " + session.describe(destination) +
                           ": it did not receive in time (dead, hung, or far behind)");
    }
    backoff.pause_moving(payload.size());
  }
}

bool try_receive_string(const MpiSession& session, int tag, std::string& payload, int& sender) {
  int arrived = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, tag, session.world(), &arrived, &status), "MPI_Iprobe");
  if (!arrived) return false;
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
  payload.assign(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Recv(payload.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, session.world(),
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
  sender = status.MPI_SOURCE;
  return true;
}

std::string receive_string(const MpiSession& session, int source, int tag, Deadline deadline,
                           const std::string& what, int* sender) {
  MPI_Status status;
  PollBackoff backoff;
  while (true) {
    int arrived = 0;
    check_mpi(MPI_Iprobe(source, tag, session.world(), &arrived, &status), "MPI_Iprobe");
    if (arrived) break;
    if (std::chrono::steady_clock::now() > deadline) {
      throw TransportError("timed out waiting for " + what + " from " +
                           (source == MPI_ANY_SOURCE ? std::string("any rank")
                                                     : session.describe(source)) +
                           ": the rank died, hung, or is far behind (raise runtime.timeout_s if "
                           "it is only slow)");
    }
    backoff.pause();
  }
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
  std::string payload(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Recv(payload.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, session.world(),
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
  if (sender != nullptr) *sender = status.MPI_SOURCE;
  return payload;
}

std::vector<std::string> gather_strings(const MpiSession& session, const std::string& local,
                                        int tag, double timeout_s, const std::string& what) {
  const Deadline deadline = deadline_after(timeout_s);
  if (session.rank() != 0) {
    send_string(session, 0, tag, local, deadline, what);
    return {};
  }
  std::vector<std::string> all(static_cast<size_t>(session.size()));
  std::vector<bool> heard(static_cast<size_t>(session.size()), false);
  all[0] = local;
  heard[0] = true;
  for (int received = 1; received < session.size(); ++received) {
    int sender = -1;
    try {
      std::string payload = receive_string(session, MPI_ANY_SOURCE, tag, deadline, what, &sender);
      all[static_cast<size_t>(sender)] = std::move(payload);
      heard[static_cast<size_t>(sender)] = true;
    } catch (const TransportError&) {
      std::string missing;
      for (int r = 0; r < session.size(); ++r) {
        if (!heard[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + session.describe(r);
      }
      throw TransportError("timed out after " + std::to_string(timeout_s) + " s waiting for " +
                           what + "; never arrived from: " + missing);
    }
  }
  return all;
}

std::string broadcast_string(const MpiSession& session, const std::string& value, int tag,
                             double timeout_s, const std::string& what) {
  const Deadline deadline = deadline_after(timeout_s);
  if (session.rank() == 0) {
    // Post every send first so that one slow receiver does not delay the others.
    const int count = message_count(value, what);
    std::vector<MPI_Request> requests(static_cast<size_t>(session.size() - 1));
    for (int r = 1; r < session.size(); ++r) {
      check_mpi(MPI_Isend(value.data(), count, MPI_CHAR, r, tag,
                      session.world(), &requests[static_cast<size_t>(r - 1)]),
            "MPI_Isend");
    }
    PollBackoff backoff;
    while (!requests.empty()) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                        MPI_STATUSES_IGNORE),
            "MPI_Testall");
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw TransportError("timed out after " + std::to_string(timeout_s) + " s sending " + what +
                             " to the other ranks");
      }
      backoff.pause_moving(value.size());
    }
    return value;
  }
  return receive_string(session, 0, tag, deadline, what);
}
}  // namespace sluice
