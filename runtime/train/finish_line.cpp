#include "runtime/train/finish_line.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "common/poll_backoff.h"
#include "common/rank_tree.h"

namespace sluice::runtime {
namespace {

constexpr int alive_tag = 7330;
constexpr std::chrono::microseconds finish_max_sleep{50000};

}  // namespace

std::vector<int> heartbeat_peers(const RolePlan& roles, int rank, int size) {
  std::vector<int> peers;
  const RankPlacement& me = roles.at(rank);
  peers.insert(peers.end(), me.feeds.begin(), me.feeds.end());
  if (me.fed_by >= 0) peers.push_back(me.fed_by);
  const std::vector<int> models = roles.model_ranks();
  const auto mine = std::find(models.begin(), models.end(), rank);
  if (mine != models.end() && models.size() > 1) {
    const auto i = static_cast<size_t>(mine - models.begin());
    peers.push_back(models[(i + 1) % models.size()]);
    peers.push_back(models[(i + models.size() - 1) % models.size()]);
  }
  if (const int parent = RankTree::parent(rank); parent >= 0) peers.push_back(parent);
  for (int child : RankTree::children(rank, size)) peers.push_back(child);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

FinishLine::FinishLine(const MpiSession& session, double timeout_s, std::vector<int> watchers)
    : session_(session),
      timeout_s_(timeout_s),
      watchers_(std::move(watchers)),
      last_sent_(Clock::now()),
      heartbeat_(session.heartbeat(timeout_s)) {}

void FinishLine::still_working() {
  // The heartbeat says so already, from a thread of its own, even in the middle of a long step.
  if (heartbeat_ != nullptr) return;
  if (watchers_.empty() ||
      std::chrono::duration<double>(Clock::now() - last_sent_).count() < timeout_s_ / 4) {
    return;
  }
  last_sent_ = Clock::now();
  static const char alive = 1;  // never written: safe to leave to MPI after the request is freed
  for (int watcher : watchers_) {
    MPI_Request request;
    check_mpi(MPI_Isend(&alive, 1, MPI_CHAR, watcher, alive_tag, session_.world(), &request), "MPI_Isend(alive)");
    check_mpi(MPI_Request_free(&request), "MPI_Request_free(alive)");
  }
}

void FinishLine::drain_alive_messages(Clock::time_point& last_heard) {
  while (true) {
    int arrived = 0;
    MPI_Status status;
    check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, alive_tag, session_.world(), &arrived, &status), "MPI_Iprobe(alive)");
    if (!arrived) return;
    char byte = 0;
    check_mpi(MPI_Recv(&byte, 1, MPI_CHAR, status.MPI_SOURCE, alive_tag, session_.world(), MPI_STATUS_IGNORE),
              "MPI_Recv(alive)");
    last_heard = Clock::now();
  }
}

void FinishLine::wait_for_everyone() {
  if (session_.size() == 1) return;
  MPI_Request barrier;
  check_mpi(MPI_Ibarrier(session_.world(), &barrier), "MPI_Ibarrier");
  auto last_heard = Clock::now();
  std::vector<int> everyone;
  for (int r = 0; r < session_.size(); ++r) everyone.push_back(r);
  // Ranks reach the line minutes apart (a data rank's last send comes steps before its model
  // ranks' last step and final checkpoint): polls that slow down as the wait lasts cost the ranks
  // still working next to nothing, and the end is seen at most 1/32 of the wait late.
  PollBackoff backoff(finish_max_sleep);
  while (true) {
    int done = 0;
    check_mpi(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test(barrier)");
    if (done) break;
    if (heartbeat_ != nullptr) {
      // Every rank is waited for as long as it is alive; the first silent one is named.
      const int silent = heartbeat_->first_lost(everyone, timeout_s_);
      if (silent >= 0) {
        throw TransportError("the end of the run: not every rank arrived, and " +
                             heartbeat_->describe_loss(silent, timeout_s_));
      }
      backoff.pause();
      continue;
    }
    drain_alive_messages(last_heard);
    if (std::chrono::duration<double>(Clock::now() - last_heard).count() > timeout_s_) {
      throw TransportError("the end of the run: not every rank arrived, and none of the ranks still working said so "
                           "for " + std::to_string(timeout_s_) + " s (runtime.timeout_s); a rank died or hung "
                           "after its part (the ranks' logs name it), or a final validation or checkpoint "
                           "takes longer than runtime.timeout_s between signs of life");
    }
    backoff.pause();
  }
  // "Alive" messages that crossed the barrier are left unreceived; they are one byte each.
  auto ignored = Clock::now();
  drain_alive_messages(ignored);
}

}  // namespace sluice::runtime
