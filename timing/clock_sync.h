#pragma once
// Aligning every rank's clock to rank 0's, so that spans of different hosts share one time axis.
//
// Protocol (ping-pong, made at the start and at the end of a run): rank 0 serves the other ranks
// in rank order; rank r sends `rounds` pings, each answered with rank 0's now_ns(). For each ping
// r knows its send time t0, receive time t1 and rank 0's time T, so offset = (t0 + t1)/2 - T,
// exact if the two legs took equal time and off by at most (t1 - t0)/2 otherwise. The 10% of
// pings with the highest round trip are dropped (interrupted or queued), the offset is the median
// of the rest and its uncertainty half their median round trip. Two estimates (start, end) give
// a linear drift. Every wait has the deadline `timeout_s`; a silent rank throws TransportError.
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/mpi_session.h"

namespace sluice::timing {

struct ClockEstimate {
  int64_t local_ns = 0;        // this rank's now_ns() when the estimate was made
  int64_t offset_ns = 0;       // local minus rank 0's clock
  int64_t uncertainty_ns = 0;  // +- bound of offset_ns
  int64_t round_trip_ns = 0;   // median round trip of the pings kept
  int pings = 0;               // pings kept
};

struct ClockAlignment {
  int reference_rank = 0;
  ClockEstimate start;
  std::optional<ClockEstimate> end;
  double drift = 0.0;  // d(offset)/d(local time), from start and end; 0 with one estimate

  // A local now_ns() value on rank 0's clock.
  int64_t to_reference(int64_t local_ns) const;
  // The larger uncertainty of the two estimates.
  int64_t uncertainty_ns() const;
  nlohmann::json to_json() const;
  static ClockAlignment from_json(const nlohmann::json& json);
};

// Collective over every rank of `session` (rank 0 serves, the others ping). A one-rank world
// returns offset 0 at once.
ClockEstimate estimate_clock_offset(const MpiSession& session, int rounds, double timeout_s);

// Sets alignment.end and the drift from a second estimate.
void finish_alignment(ClockAlignment& alignment, const ClockEstimate& end);

}  // namespace sluice::timing
