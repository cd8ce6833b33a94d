#pragma once
// Logging: one named spdlog logger per layer ("common", "dataset", "cache", "runtime",
// "launcher"), all sharing one sink whose pattern carries rank and host. The level comes from
// SLUICE_LOG_LEVEL (trace, debug, info, warn, error; default info).
//
// Rank 0 prints summaries; other ranks print only what is theirs.
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace sluice::log {

// Sets the pattern's rank and host; call once after MPI is up (before, rank shows as "-").
void set_identity(int rank, const std::string& host);

// The logger of one layer; created on first use, safe to call from any thread.
std::shared_ptr<spdlog::logger> get(const std::string& layer);

}  // namespace sluice::log
