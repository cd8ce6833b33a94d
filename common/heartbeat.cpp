#include "common/heartbeat.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <limits>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "common/stop_signal.h"

namespace sluice {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

constexpr int heartbeat_tag = 1;
// "I am leaving" (a rank past its finish line, in MpiSession's destructor): its silence from
// then on is no sign of trouble.
constexpr int farewell_tag = 2;
// The rank is failing and about to end the job.
constexpr int failure_tag = 3;
constexpr int64_t departed = std::numeric_limits<int64_t>::max();
std::atomic<const Heartbeat*> process_heartbeat{nullptr};

}  // namespace

Heartbeat::Heartbeat(MPI_Comm world, std::vector<std::string> hosts, bool beat)
    : hosts_(std::move(hosts)), beat_(beat), heard_ns_(new std::atomic<int64_t>[hosts_.size()]),
      failed_(new std::atomic<bool>[hosts_.size()]), warned_(hosts_.size(), false),
      watched_(new std::atomic<bool>[hosts_.size()]) {
  for (size_t r = 0; r < hosts_.size(); ++r) watched_[r] = true;
  check_mpi(MPI_Comm_rank(world, &rank_), "MPI_Comm_rank");
  // Collective (every rank makes its session): a communicator of its own, so that no heartbeat
  // can match a receive of the feed or of the all-reduce.
  comm_ = MpiCommunicator::duplicate(world, "heartbeat");
  for (size_t r = 0; r < hosts_.size(); ++r) {
    heard_ns_[r] = 0;
    failed_[r] = false;
  }
}

Heartbeat::~Heartbeat() { stop(); }  // then comm_ is freed (the thread's calls are over)

void Heartbeat::start(double timeout_s) {
  if (!beat_ || !(timeout_s > 0)) return;
  if (timeout_s_.load() == 0.0 || timeout_s < timeout_s_.load()) timeout_s_ = timeout_s;
  // Ten beats per deadline: a peer is silent only after missing ten in a row.
  const double interval = std::clamp(timeout_s / 10, 0.01, 0.5);
  if (interval < interval_s_.load()) interval_s_ = interval;
  if (warn_after_s_.load() == 0.0 || timeout_s / 2 < warn_after_s_.load()) warn_after_s_ = timeout_s / 2;
  if (thread_.joinable()) return;
  const int64_t now = now_ns();
  for (size_t r = 0; r < hosts_.size(); ++r) heard_ns_[r] = now;
  listened_ns_ = now;
  thread_ = std::thread([this] { loop(); });
  process_heartbeat = this;
}

void Heartbeat::stop() {
  if (!thread_.joinable()) return;
  if (process_heartbeat.load() == this) process_heartbeat = nullptr;
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  thread_.join();
}

const Heartbeat* Heartbeat::process() { return process_heartbeat.load(); }

void Heartbeat::loop() {
  while (true) {
    if (stopping_) {
      try {
        beat(farewell_tag);
      } catch (const std::exception&) {
        // Leaving anyway: the others then warn about this rank's silence, nothing worse.
      }
      return;
    }
    try {
      beat(heartbeat_tag);
      listen();
      warn_about_silence();
    } catch (const std::exception& error) {
      // An MPI error here (a peer's connection gone) says nothing the silence will not.
      log::get("runtime")->debug("heartbeat: {}", error.what());
    }
    std::unique_lock<std::mutex> lock(stop_mutex_);
    stop_requested_.wait_for(lock, std::chrono::duration<double>(interval_s_.load()), [&] { return stopping_.load(); });
  }
}

void Heartbeat::watch_only(std::vector<int> peers) {
  std::lock_guard<std::mutex> lock(peers_mutex_);
  for (size_t r = 0; r < hosts_.size(); ++r) watched_[r] = false;
  peers.erase(std::remove_if(peers.begin(), peers.end(),
                             [&](int r) { return r == rank_ || r < 0 || r >= static_cast<int>(hosts_.size()); }),
              peers.end());
  for (int r : peers) watched_[static_cast<size_t>(r)] = true;
  peers_ = std::move(peers);
}

void Heartbeat::beat(int tag, int code) {
  // Never written: MPI may read a message's byte after its request is freed. A failure's byte is
  // the failing rank's exit code; a beat's and a farewell's are 1.
  static const std::array<char, 256> bytes = [] {
    std::array<char, 256> all{};
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<char>(i);
    return all;
  }();
  const char& alive = bytes[static_cast<size_t>(tag == failure_tag ? std::clamp(code, 0, 255) : 1)];
  std::vector<int> to;
  if (tag != failure_tag) {  // a failure is told to everyone, once: any rank may wait on this one
    std::lock_guard<std::mutex> lock(peers_mutex_);
    to = peers_;
  }
  if (to.empty()) {
    for (int r = 0; r < static_cast<int>(hosts_.size()); ++r) {
      if (r != rank_ && (tag == failure_tag || watched_[static_cast<size_t>(r)])) to.push_back(r);
    }
  }
  for (int r : to) {
    MPI_Request request;
    check_mpi(MPI_Isend(&alive, 1, MPI_CHAR, r, tag, comm_.get(), &request), "MPI_Isend(heartbeat)");
    check_mpi(MPI_Request_free(&request), "MPI_Request_free(heartbeat)");
  }
}

void Heartbeat::listen() {
  const int64_t began = now_ns();
  while (true) {
    int arrived = 0;
    MPI_Message message;
    MPI_Status status;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_.get(), &arrived, &message, &status), "MPI_Improbe(heartbeat)");
    if (!arrived) break;
    char byte = 0;
    check_mpi(MPI_Mrecv(&byte, 1, MPI_CHAR, &message, MPI_STATUS_IGNORE), "MPI_Mrecv(heartbeat)");
    const auto source = static_cast<size_t>(status.MPI_SOURCE);
    if (status.MPI_TAG == failure_tag && !failed_[source].exchange(true)) {
      // Only this thread writes them: the code first, so that a reader who sees the rank sees it too.
      if (first_failed_.load() < 0) {
        first_failed_code_ = static_cast<unsigned char>(byte);
        first_failed_ = status.MPI_SOURCE;
      }
      log::get("runtime")->warn("{} failed and is ending the job", describe(status.MPI_SOURCE));
    }
    std::atomic<int64_t>& heard = heard_ns_[source];
    if (heard.load() != departed) heard = status.MPI_TAG == farewell_tag ? departed : now_ns();
  }
  forgive_own_stall(began);
  listened_ns_ = now_ns();
}

void Heartbeat::forgive_own_stall(int64_t listen_began_ns) {
  // This rank itself did not run for a while (stopped and continued, or starved of CPU): the
  // others' silence in that time is not theirs to answer for (their beats queued up unread, or
  // they gave up on this rank and ended). Silence counts only while this rank listens. The gap is
  // measured from the previous listen's end to this one's, so a stop anywhere in between counts:
  // in the wait, while beating, or inside the probes above, after which the beats queued
  // meanwhile may not all have been read yet (one probe progresses only part of them). Checked
  // only before the probes, a rank stopped inside them named its healthy peers (seen once in ~11
  // runs of TrainJob.SilentDataRankIsNamedAndTheJobEnds).
  const int64_t now = now_ns();
  const int64_t gap = now - listened_ns_.load();
  const auto expected = static_cast<int64_t>(interval_s_.load() * 1e9);
  if (gap <= 3 * expected) return;
  const int64_t lost = gap - expected;
  for (size_t r = 0; r < hosts_.size(); ++r) {
    const int64_t heard = heard_ns_[r].load();
    // A rank heard in this listen is up to date already.
    if (heard != departed && heard < listen_began_ns) heard_ns_[r] = std::min(heard + lost, now);
  }
  log::get("runtime")->warn("this rank did not run for {:.1f} s (stopped, or starved of CPU); other ranks may "
                            "have named it", double(lost) * 1e-9);
}

void Heartbeat::warn_about_silence() {
  const double warn_after = warn_after_s_.load();
  for (int r = 0; r < static_cast<int>(hosts_.size()); ++r) {
    if (r == rank_ || !watched_[static_cast<size_t>(r)]) continue;
    const double silent = silent_s(r);
    if (!warned_[static_cast<size_t>(r)] && silent > warn_after) {
      warned_[static_cast<size_t>(r)] = true;
      log::get("runtime")->warn("{} has given no sign of life for {:.1f} s (half of runtime.timeout_s): stopped, "
                                "dead or cut off? A rank waiting on it fails at runtime.timeout_s",
                                describe(r), silent);
    } else if (warned_[static_cast<size_t>(r)] && silent < interval_s_.load() * 2) {
      warned_[static_cast<size_t>(r)] = false;
      log::get("runtime")->info("{} is alive again", describe(r));
    }
  }
}

double Heartbeat::silent_s(int rank) const {
  if (rank == rank_ || rank < 0 || rank >= static_cast<int>(hosts_.size())) return 0.0;
  if (!watched_[static_cast<size_t>(rank)]) return 0.0;  // not a peer: its own peers watch it
  const int64_t heard = heard_ns_[static_cast<size_t>(rank)].load();
  if (heard == departed) return 0.0;  // it finished and said goodbye
  const int64_t silent = listened_ns_.load() - heard;
  return std::max<int64_t>(0, silent) * 1e-9;
}

bool Heartbeat::failed(int rank) const {
  return rank >= 0 && rank < static_cast<int>(hosts_.size()) && failed_[static_cast<size_t>(rank)].load();
}

double Heartbeat::stopping_silence_s() const { return std::max(2.0, 5 * interval_s_.load()); }

bool Heartbeat::lost(int rank, double timeout_s) const {
  if (failed(rank)) return true;
  const double silent = silent_s(rank);
  return silent > timeout_s || (stop_requested() && silent > stopping_silence_s());
}

int Heartbeat::first_lost(const std::vector<int>& ranks, double timeout_s) const {
  for (int r : ranks) {
    if (lost(r, timeout_s)) return r;
  }
  return -1;
}

std::pair<int, int> Heartbeat::first_failure() const {
  const int rank = first_failed_.load();
  return {rank, rank >= 0 ? first_failed_code_.load() : 0};
}

void Heartbeat::announce_failure(int code) {
  if (!running()) return;
  try {
    beat(failure_tag, code);
  } catch (const std::exception& error) {
    // The job ends anyway; the others then see this rank's silence.
    log::get("runtime")->debug("heartbeat: announcing the failure: {}", error.what());
  }
}

std::string Heartbeat::describe(int rank) const { return describe_rank(rank, hosts_); }

std::string Heartbeat::describe_loss(int rank, double timeout_s) const {
  if (failed(rank)) return describe(rank) + " failed and is ending the job (its own error, in its log, says why)";
  const double silent = silent_s(rank);
  char seconds[64];
  std::snprintf(seconds, sizeof(seconds), "%.1f s (runtime.timeout_s = %g)", silent, timeout_s);
  std::string after_stop;
  if (silent <= timeout_s && stop_requested()) {
    // Lost sooner than runtime.timeout_s because this rank is stopping (lost()). The supervisor
    // reads these words (supervisor/round_fault.cpp: a consequence of a kill, not its cause).
    after_stop = std::string(", this rank stopping on ") + stop_signal_name() +
                 " (a stop is agreed with live peers only: it is not waited for any longer)";
  }
  return describe(rank) + " gave no sign of life for " + seconds + after_stop +
         ": it is stopped, dead or cut off from this rank";
}

}  // namespace sluice
