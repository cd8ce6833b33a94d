#include "runtime/train/status_board.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace sluice::runtime {
namespace {

constexpr int status_tag = 7310;

nlohmann::json to_json(const RankStatus& s) {
  return {{"role", s.role},         {"step", s.step},         {"end_step", s.end_step},
          {"samples_per_s", s.samples_per_s}, {"frames_per_s", s.frames_per_s},
          {"input_wait", s.input_wait}, {"seconds_per_step", s.seconds_per_step}};
}

RankStatus from_json(const nlohmann::json& j) {
  RankStatus s;
  s.role = j.value("role", "");
  s.step = j.value("step", int64_t{0});
  s.end_step = j.value("end_step", int64_t{0});
  s.samples_per_s = j.value("samples_per_s", 0.0);
  s.frames_per_s = j.value("frames_per_s", 0.0);
  s.input_wait = j.value("input_wait", 0.0);
  s.seconds_per_step = j.value("seconds_per_step", 0.0);
  return s;
}

}  // namespace

StatusBoard::StatusBoard(const MpiSession& session, double every_s)
    : session_(session), every_s_(every_s), started_(MPI_Wtime()) {}

StatusBoard::~StatusBoard() {
  // A status still in flight at the end: rank 0 no longer listens. The request is released and
  // its few bytes are left to MPI (outgoing_ lives as long as this board, past MPI's use of it
  // for an eager send, which has completed locally by the time the job ends).
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
    try {
      latest_[sender] = from_json(nlohmann::json::parse(payload));
    } catch (const nlohmann::json::exception&) {
      // A garbled status costs one line's freshness, never the run.
    }
  }
}

void StatusBoard::post(const RankStatus& status) {
  if (!due()) {
    if (session_.rank() == 0 && every_s_ > 0) drain();
    return;
  }
  last_post_ = MPI_Wtime();
  if (session_.rank() == 0) {
    drain();
    latest_[0] = status;
    std::printf("%s\n", render(latest_, session_).c_str());
    std::fflush(stdout);
    return;
  }
  if (pending_ != MPI_REQUEST_NULL) {
    int done = 0;
    check_mpi(MPI_Test(&pending_, &done, MPI_STATUS_IGNORE), "MPI_Test(status)");
    if (!done) return;  // rank 0 has not taken the last one yet: skip this one
  }
  outgoing_ = to_json(status).dump();
  check_mpi(MPI_Isend(outgoing_.data(), static_cast<int>(outgoing_.size()), MPI_CHAR, 0, status_tag,
                      session_.world(), &pending_),
            "MPI_Isend(status)");
}

std::string StatusBoard::render(const std::map<int, RankStatus>& statuses, const MpiSession& session) {
  int64_t step = 0, end_step = 0;
  double samples = 0, frames = 0, wait = 0;
  int models = 0, slowest = -1;
  double slowest_s = 0;
  for (const auto& [rank, s] : statuses) {
    if (s.role == "data") continue;
    ++models;
    step = std::max(step, s.step);
    end_step = std::max(end_step, s.end_step);
    samples += s.samples_per_s;
    frames += s.frames_per_s;
    wait += s.input_wait;
    if (slowest < 0 || s.seconds_per_step > slowest_s) {
      slowest = rank;
      slowest_s = s.seconds_per_step;
    }
  }
  char line[512];
  if (models == 0) {
    std::snprintf(line, sizeof(line), "status: waiting for the first model-rank status");
    return line;
  }
  std::snprintf(line, sizeof(line),
                "status: step %lld/%lld | %.1f samples/s, %.0f frames/s | input wait %.1f%% | slowest %s %.3f s/step "
                "(%d of %d ranks reporting)",
                static_cast<long long>(step), static_cast<long long>(end_step), samples, frames,
                100.0 * wait / models, session.describe(slowest).c_str(), slowest_s,
                static_cast<int>(statuses.size()), session.size());
  return line;
}

}  // namespace sluice::runtime
