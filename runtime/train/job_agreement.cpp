#include "runtime/train/job_agreement.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "runtime/settings.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

// One rank's announcement on the wire (MPI_Allgather of int64 values).
constexpr int announcement_values = 4;

std::vector<RankAnnouncement> gather_announcements(const MpiSession& session, const RankAnnouncement& mine) {
  const int64_t local[announcement_values] = {static_cast<int64_t>(mine.kind), mine.resume ? 1 : 0, mine.resume_step,
                                              mine.own_config ? 1 : 0};
  std::vector<int64_t> all(static_cast<size_t>(announcement_values * session.size()));
  check_mpi(MPI_Allgather(local, announcement_values, MPI_INT64_T, all.data(), announcement_values, MPI_INT64_T,
                          session.world()),
            "MPI_Allgather(rank kinds)");
  std::vector<RankAnnouncement> result(static_cast<size_t>(session.size()));
  for (size_t r = 0; r < result.size(); ++r) {
    const int64_t* v = all.data() + r * announcement_values;
    result[r] = {v[0] == 1 ? RankKind::python : RankKind::sluice, v[1] != 0, v[2], v[3] != 0};
  }
  return result;
}

// `text` from `root` to every rank (MPI_Bcast of the length, then the bytes).
std::string broadcast_text(const MpiSession& session, std::string text, int root, const char* what) {
  int64_t length = static_cast<int64_t>(text.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT64_T, root, session.world()), what);
  text.resize(static_cast<size_t>(length));
  check_mpi(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, session.world()), what);
  return text;
}

// The same check on every rank, from the gathered announcements: the same ConfigError everywhere.
void check_kinds(const std::vector<RankAnnouncement>& all) {
  int64_t resume_step = -2;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].kind != RankKind::python) continue;
    if (r == 0 && all.size() > 1) {
      throw ConfigError("rank 0 is a Python rank: put `sluice train` first in the launch (mpirun -np 1 sluice train "
                        "-c CFG : -np 2 python3 train.py), so that rank 0 is a sluice rank that owns the config");
    }
    if (all[r].resume_step < -1) {
      throw ConfigError("sluice.Feed(resume_step=" + std::to_string(all[r].resume_step) + ") on rank " +
                        std::to_string(r) + ": a global step is 0 or more; pass None to start at the beginning");
    }
    if (resume_step != -2 && all[r].resume_step != resume_step) {
      throw ConfigError("the Python ranks resume from different steps (" + std::to_string(resume_step) + " and " +
                        std::to_string(all[r].resume_step) + " on rank " + std::to_string(r) +
                        "): give every rank the same sluice.Feed(resume_step=...)");
    }
    resume_step = all[r].resume_step;
  }
  if (resume_step == -2) return;
  for (const RankAnnouncement& a : all) {
    if (a.resume) {
      throw ConfigError("--resume continues from sluice's own checkpoints, but the model ranks are Python ranks, "
                        "which checkpoint themselves: drop --resume and pass sluice.Feed(resume_step=N) in the script");
    }
  }
}

}  // namespace

std::vector<int> JobAgreement::python_ranks() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < kinds.size(); ++r) {
    if (kinds[r] == RankKind::python) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::string config_differences(const config::Config& here, const config::Config& rank0) {
  const json a = here.to_json(), b = rank0.to_json();
  std::string differences;
  for (const auto& [section, keys] : b.items()) {
    for (const auto& [key, value] : keys.items()) {
      const json mine = a.contains(section) && a[section].contains(key) ? a[section][key] : json();
      if (mine == value) continue;
      differences += (differences.empty() ? "" : "; ") + section + "." + key + ": " + mine.dump() + " here, " +
                     value.dump() + " on rank 0";
    }
  }
  return differences;
}

JobAgreement agree_on_job(const MpiSession& session, const RankAnnouncement& mine, config::Config& config) {
  const std::vector<RankAnnouncement> all = gather_announcements(session, mine);
  JobAgreement job;
  for (const RankAnnouncement& a : all) job.kinds.push_back(a.kind);
  if (job.python_ranks().empty()) return job;
  check_kinds(all);
  for (const RankAnnouncement& a : all) {
    if (a.kind == RankKind::python) job.resume_step = a.resume_step;
  }
  if (session.size() == 1) return job;  // one Python process: its own config
  // With each value's origin: a setting rank 0 left at its default is a default here too, which
  // the check against the cache (cache_agreement.h) takes from the cache instead.
  const std::string wire = broadcast_text(session, session.rank() == 0 ? config.to_wire().dump() : "", 0,
                                          "MPI_Bcast(rank 0's config)");
  // Rank 0 keeps its own; every other rank compares (when its script gave a config) and takes it.
  std::optional<config::Config> rank0;
  std::string difference;
  if (session.rank() != 0) {
    rank0 = config::Config::from_wire(settings_schema(), json::parse(wire));
    if (mine.own_config) difference = config_differences(config, *rank0);
  }
  int first = difference.empty() ? session.size() : session.rank();
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, session.world()), "MPI_Allreduce(config check)");
  if (first < session.size()) {
    const std::string message = broadcast_text(session, difference, first, "MPI_Bcast(config difference)");
    throw ConfigError("the config given to the Python rank " + std::to_string(first) +
                      " (sluice.Feed(config=..., overrides=...)) differs from rank 0's: " + message +
                      "; give the script the same file and overrides as `sluice train`, or leave them out to take "
                      "rank 0's");
  }
  if (rank0) config = std::move(*rank0);
  return job;
}

}  // namespace sluice::runtime
