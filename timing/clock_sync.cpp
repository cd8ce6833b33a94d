#include "timing/clock_sync.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "common/poll_backoff.h"
#include "timing/span_recorder.h"

namespace sluice::timing {
namespace {

constexpr int ping_tag = 7301;
constexpr int pong_tag = 7302;

// Completes `request` before `deadline` or throws naming the peer. Polls with a PollBackoff: a
// ping or reply of the exchange lands within microseconds and is caught while it spins, so the
// round trips measured are the same; a wait for a peer that is not there yet (rank 0 at the end
// of a prep waits for the others to reach it: up to their 20 ms poll, and longer for a slow
// rank) sleeps instead of yielding in a loop, which had cost rank 0 a tenth of a one-row prep's
// CPU.
void wait_for(const MpiSession& session, MPI_Request& request, Deadline deadline, int peer, const char* what) {
  PollBackoff backoff;
  while (true) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      check_mpi_or_warn(MPI_Cancel(&request), "MPI_Cancel(clock alignment)");
      check_mpi_or_warn(MPI_Request_free(&request), "MPI_Request_free(clock alignment)");
      throw TransportError(std::string("clock alignment: timed out waiting for ") + what + " of " +
                           session.describe(peer) + ": it died, hung or never reached the alignment");
    }
    backoff.pause();
  }
}

int64_t median(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

}  // namespace

int64_t ClockAlignment::to_reference(int64_t local_ns) const {
  const double offset = static_cast<double>(start.offset_ns) +
                        drift * static_cast<double>(local_ns - start.local_ns);
  return local_ns - static_cast<int64_t>(offset);
}

int64_t ClockAlignment::uncertainty_ns() const {
  return std::max(start.uncertainty_ns, end ? end->uncertainty_ns : int64_t{0});
}

nlohmann::json ClockAlignment::to_json() const {
  const auto estimate = [](const ClockEstimate& e) {
    return nlohmann::json{{"local_ns", e.local_ns},          {"offset_ns", e.offset_ns},
                          {"uncertainty_ns", e.uncertainty_ns}, {"round_trip_ns", e.round_trip_ns},
                          {"pings", e.pings}};
  };
  return {{"reference_rank", reference_rank},
          {"start", estimate(start)},
          {"end", end ? estimate(*end) : nlohmann::json(nullptr)},
          {"drift", drift}};
}

ClockAlignment ClockAlignment::from_json(const nlohmann::json& json) {
  const auto estimate = [](const nlohmann::json& j) {
    ClockEstimate e;
    e.local_ns = j.at("local_ns").get<int64_t>();
    e.offset_ns = j.at("offset_ns").get<int64_t>();
    e.uncertainty_ns = j.at("uncertainty_ns").get<int64_t>();
    e.round_trip_ns = j.value("round_trip_ns", int64_t{0});
    e.pings = j.value("pings", 0);
    return e;
  };
  ClockAlignment alignment;
  alignment.reference_rank = json.value("reference_rank", 0);
  alignment.start = estimate(json.at("start"));
  if (json.contains("end") && !json["end"].is_null()) alignment.end = estimate(json["end"]);
  alignment.drift = json.value("drift", 0.0);
  return alignment;
}

ClockEstimate estimate_clock_offset(const MpiSession& session, int rounds, double timeout_s) {
  ClockEstimate estimate;
  estimate.local_ns = now_ns();
  if (session.size() == 1) return estimate;
  const Deadline deadline = deadline_after(timeout_s);
  if (session.rank() == 0) {
    for (int peer = 1; peer < session.size(); ++peer) {
      for (int i = 0; i < rounds; ++i) {
        int64_t ping = 0;
        MPI_Request request;
        check_mpi(MPI_Irecv(&ping, 1, MPI_INT64_T, peer, ping_tag, session.world(), &request), "MPI_Irecv");
        wait_for(session, request, deadline, peer, "a clock ping");
        const int64_t reference = now_ns();
        check_mpi(MPI_Isend(&reference, 1, MPI_INT64_T, peer, pong_tag, session.world(), &request), "MPI_Isend");
        wait_for(session, request, deadline, peer, "a clock reply to be taken");
      }
    }
    return estimate;
  }
  std::vector<std::pair<int64_t, int64_t>> samples;  // (round trip, offset)
  for (int i = 0; i < rounds; ++i) {
    int64_t reference = 0;
    MPI_Request receive;
    check_mpi(MPI_Irecv(&reference, 1, MPI_INT64_T, 0, pong_tag, session.world(), &receive), "MPI_Irecv");
    const int64_t t0 = now_ns();
    MPI_Request send;
    check_mpi(MPI_Isend(&t0, 1, MPI_INT64_T, 0, ping_tag, session.world(), &send), "MPI_Isend");
    wait_for(session, send, deadline, 0, "rank 0 to take a clock ping");
    wait_for(session, receive, deadline, 0, "a clock reply");
    const int64_t t1 = now_ns();
    samples.emplace_back(t1 - t0, (t0 + t1) / 2 - reference);
  }
  std::sort(samples.begin(), samples.end());
  samples.resize(std::max<size_t>(1, samples.size() - samples.size() / 10));
  std::vector<int64_t> offsets, trips;
  for (const auto& [trip, offset] : samples) {
    trips.push_back(trip);
    offsets.push_back(offset);
  }
  estimate.offset_ns = median(offsets);
  estimate.round_trip_ns = median(trips);
  estimate.uncertainty_ns = estimate.round_trip_ns / 2;
  estimate.pings = static_cast<int>(samples.size());
  return estimate;
}

void finish_alignment(ClockAlignment& alignment, const ClockEstimate& end) {
  alignment.end = end;
  const int64_t elapsed = end.local_ns - alignment.start.local_ns;
  alignment.drift = elapsed > 0 ? static_cast<double>(end.offset_ns - alignment.start.offset_ns) /
                                      static_cast<double>(elapsed)
                                : 0.0;
}

}  // namespace sluice::timing
