#include "runtime/train/status_board.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "common/log.h"

namespace sluice::runtime {
namespace {

constexpr int status_tag = 7310;
// Sent as its bytes between ranks of one job (one binary, one layout).
static_assert(std::is_trivially_copyable_v<StatusSummary>, "StatusSummary travels as bytes");
// A child's summary older than this many intervals marks its subtree late.
constexpr double late_after_intervals = 3.0;

bool trains(const std::string& role) { return role != "data"; }

}  // namespace

void StatusSummary::add(int rank, const RankStatus& status) {
  ++reporting;
  if (!trains(status.role)) return;
  ++models;
  step = std::max(step, status.step);
  end_step = std::max(end_step, status.end_step);
  samples_per_s += status.samples_per_s;
  frames_per_s += status.frames_per_s;
  input_wait += status.input_wait;
  if (slowest < 0 || status.seconds_per_step > slowest_s) {
    slowest = rank;
    slowest_s = status.seconds_per_step;
  }
}

void StatusSummary::add(const StatusSummary& other) {
  reporting += other.reporting;
  late += other.late;
  if (other.first_late >= 0 && (first_late < 0 || other.first_late < first_late)) first_late = other.first_late;
  models += other.models;
  step = std::max(step, other.step);
  end_step = std::max(end_step, other.end_step);
  samples_per_s += other.samples_per_s;
  frames_per_s += other.frames_per_s;
  input_wait += other.input_wait;
  if (other.slowest >= 0 && (slowest < 0 || other.slowest_s > slowest_s)) {
    slowest = other.slowest;
    slowest_s = other.slowest_s;
  }
}

void StatusSummary::add_late(int rank, int ranks) {
  late += ranks;
  if (first_late < 0 || rank < first_late) first_late = rank;
}

StatusBoard::StatusBoard(const MpiSession& session, double every_s)
    : session_(session), every_s_(every_s), parent_(RankTree::parent(session.rank())),
      children_(RankTree::children(session.rank(), session.size())),
      from_child_(children_.size()), heard_(children_.size(), MPI_Wtime()) {}

StatusBoard::~StatusBoard() {
  // A summary still in flight at the end: the parent no longer listens. The request is released
  // and its few bytes are left to MPI (outgoing_ lives as long as this board, past MPI's use of
  // it for an eager send, which has completed locally by the time the job ends).
  if (pending_ != MPI_REQUEST_NULL) {
    int done = 0;
    if (check_mpi_or_warn(MPI_Test(&pending_, &done, MPI_STATUS_IGNORE), "MPI_Test(status)") && !done) {
      check_mpi_or_warn(MPI_Request_free(&pending_), "MPI_Request_free(status)");
    }
  }
}

bool StatusBoard::due() const { return every_s_ > 0 && MPI_Wtime() - last_post_ >= every_s_; }

void StatusBoard::drain() {
  std::string payload;
  int sender = 0;
  while (try_receive_string(session_, status_tag, payload, sender)) {
    const auto child = std::find(children_.begin(), children_.end(), sender);
    // Only children send to this rank; anything else, or a garbled size, costs one line's
    // freshness, never the run.
    if (child == children_.end() || payload.size() != sizeof(StatusSummary)) continue;
    const auto i = static_cast<size_t>(child - children_.begin());
    std::memcpy(&from_child_[i], payload.data(), sizeof(StatusSummary));
    heard_[i] = MPI_Wtime();
  }
}

StatusSummary StatusBoard::merge(const RankStatus& mine) {
  StatusSummary summary;
  summary.add(session_.rank(), mine);
  const double now = MPI_Wtime();
  for (size_t i = 0; i < children_.size(); ++i) {
    if (now - heard_[i] > late_after_intervals * every_s_) {
      summary.add_late(children_[i], RankTree::subtree_size(children_[i], session_.size()));
    } else {
      summary.add(from_child_[i]);
    }
  }
  return summary;
}

void StatusBoard::post(const RankStatus& status) {
  if (every_s_ <= 0) return;
  if (!children_.empty()) drain();
  if (!due()) return;
  last_post_ = MPI_Wtime();
  if (parent_ < 0) {
    last_ = merge(status);
    std::printf("%s\n", render(last_, session_).c_str());
    std::fflush(stdout);
    return;
  }
  if (pending_ != MPI_REQUEST_NULL) {
    int done = 0;
    check_mpi(MPI_Test(&pending_, &done, MPI_STATUS_IGNORE), "MPI_Test(status)");
    if (!done) return;  // the parent has not taken the last one yet: skip this one
  }
  outgoing_ = merge(status);
  check_mpi(MPI_Isend(&outgoing_, static_cast<int>(sizeof(outgoing_)), MPI_CHAR, parent_, status_tag,
                      session_.world(), &pending_),
            "MPI_Isend(status)");
}

std::string StatusBoard::render(const StatusSummary& s, const MpiSession& session) {
  char line[640];
  if (s.models == 0) {
    std::snprintf(line, sizeof(line), "status: waiting for the first model-rank status (%d of %d ranks reporting)",
                  s.reporting, session.size());
    return line;
  }
  std::string late;
  if (s.late > 0) {
    late = " | late (no status for " + std::to_string(static_cast<int>(late_after_intervals)) +
           " intervals): " + std::to_string(s.late) + " rank(s), first " + session.describe(s.first_late);
  }
  std::snprintf(line, sizeof(line),
                "status: step %lld/%lld | %.1f samples/s, %.0f frames/s | input wait %.1f%% | slowest %s %.3f s/step "
                "(%d of %d ranks reporting)%s",
                static_cast<long long>(s.step), static_cast<long long>(s.end_step), s.samples_per_s, s.frames_per_s,
                100.0 * s.input_wait / s.models, session.describe(s.slowest).c_str(), s.slowest_s, s.reporting,
                session.size(), late.c_str());
  return line;
}

}  // namespace sluice::runtime
