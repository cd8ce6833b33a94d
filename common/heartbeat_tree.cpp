#include "common/heartbeat_tree.h"

#include "common/error.h"
#include "common/rank_tree.h"

namespace sluice {
namespace {

using nlohmann::json;

// A send nobody will take any more (the job is past the exchange it served): cancelled and
// released; a failure is logged, since the job's result is already decided.
void cancel_request(MPI_Request& request, const char* what) {
  const std::string cancel = std::string("MPI_Cancel(") + what + ")";
  const std::string release = std::string("MPI_Request_free(") + what + ")";
  check_mpi_or_warn(MPI_Cancel(&request), cancel.c_str());
  check_mpi_or_warn(MPI_Request_free(&request), release.c_str());
}

}  // namespace

HeartbeatTree::HeartbeatTree(const MpiSession& session, double interval_s, double timeout_s, Tags tags,
                             Wording wording)
    : session_(session),
      interval_s_(interval_s),
      timeout_s_(timeout_s),
      tags_(tags),
      wording_(std::move(wording)),
      parent_(RankTree::parent(session.rank())),
      children_(RankTree::children(session.rank(), session.size())),
      last_ping_(Clock::now()),
      last_tick_(Clock::now() - std::chrono::hours(1)) {
  for (int child : children_) {
    last_heard_[child] = Clock::now();
    pings_[child] = {MPI_REQUEST_NULL, std::string()};  // (MPI_REQUEST_NULL is not a zero in Open MPI)
  }
}

HeartbeatTree::~HeartbeatTree() {
  if (beat_request_ != MPI_REQUEST_NULL) cancel_request(beat_request_, "heartbeat");
  for (auto& [child, ping] : pings_) {
    if (ping.first != MPI_REQUEST_NULL) cancel_request(ping.first, "ping");
  }
}

bool HeartbeatTree::poll(const json& own) {
  std::string payload;
  int sender = -1;
  while (try_receive_string(session_, tags_.beat, payload, sender)) {
    latest_[sender] = json::parse(payload);
    last_heard_[sender] = Clock::now();
  }
  while (try_receive_string(session_, tags_.ping, payload, sender)) last_ping_ = Clock::now();
  if (parent_ >= 0 && seconds_since(last_ping_) > timeout_s_) {
    const std::string role = parent_ == 0 ? " (" + wording_.job + " coordinator)"
                                          : " (this rank's parent in the " + wording_.job + " heartbeat tree)";
    throw TransportError(session_.describe(parent_) + role + " has been silent for " +
                         std::to_string(static_cast<int>(seconds_since(last_ping_))) + " s (runtime.timeout_s); " +
                         wording_.after_silence);
  }
  if (seconds_since(last_tick_) < interval_s_) return false;
  last_tick_ = Clock::now();
  if (parent_ >= 0) send_if_free(beat_request_, beat_text_, subtree_beat(own).dump(), parent_, tags_.beat);
  for (int child : children_) {
    auto& [request, text] = pings_.at(child);
    send_if_free(request, text, "ping", child, tags_.ping);
  }
  return true;
}

json HeartbeatTree::subtree_beat(const json& own) const {
  json beat = own.is_object() ? own : json::object();
  json silent = json::array();
  for (const auto& [child, child_beat] : latest_) {
    for (auto& [key, value] : beat.items()) {
      if (value.is_number_integer()) value = value.get<int64_t>() + child_beat.value(key, int64_t{0});
    }
    for (const auto& s : child_beat.value("silent", json::array())) silent.push_back(s);
  }
  for (const auto& [child, heard] : last_heard_) {
    const double quiet = seconds_since(heard);
    if (quiet <= timeout_s_) continue;
    const auto it = latest_.find(child);
    silent.push_back({{"rank", child},
                      {"seconds", quiet},
                      {"last", it == latest_.end() ? json() : it->second},
                      {"noticed_by", session_.rank()}});
  }
  beat["silent"] = silent;
  return beat;
}

void HeartbeatTree::send_if_free(MPI_Request& request, std::string& buffer, std::string text, int to, int tag) {
  if (request != MPI_REQUEST_NULL) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(heartbeat tree)");
    if (!done) return;
  }
  buffer = std::move(text);
  check_mpi(MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, to, tag, session_.world(), &request),
            "MPI_Isend(heartbeat tree)");
}

}  // namespace sluice
