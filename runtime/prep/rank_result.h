#pragma once
// What one prep rank reports to rank 0 when its shards are done: typed on both ends, JSON only at
// the MPI boundary (to_json/from_json) and in prep-report.json's "ranks", whose members it keeps.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataset/vocabulary.h"
#include "runtime/prep/shard_builder.h"

namespace sluice::runtime {

struct PrepRankResult {
  int rank = 0;
  std::string host;
  bool ok = true;
  std::string error;               // the failure's message when !ok
  bool environment_error = false;  // the machine refused (ErrorKind::environment): its own exit code
  std::vector<ShardOutcome> shards;
  int64_t shards_kept = 0;         // of `shards`, complete from an earlier run
  int64_t samples = 0;
  int64_t rejects = 0;
  int64_t frames = 0;
  double audio_seconds = 0;
  std::map<std::string, int64_t> reject_reasons;
  dataset::UnknownCounts unknown;
  double wall_seconds = 0;
  StageSeconds stages;
  ThreadCpuSeconds cpu;
  WriterLoad writer;

  // The builder's result on `rank` (on `host`); its error, if any, becomes `error`'s text.
  static PrepRankResult from_build(const BuildResult& result, int rank, const std::string& host);
  // The wire and report form: {rank, host, ok, error, error_kind ("environment" or ""), shards
  // ([shard, kept, samples, rejects] each), shards_kept, samples, rejects, frames, audio_seconds,
  // reject_reasons, unknown ({code point: count}), wall_seconds, stages, cpu_seconds ({workers,
  // writer}: the builder threads' CPU time), workers (worker threads), mel_bytes (written by the
  // writer)}.
  nlohmann::json to_json() const;
  static PrepRankResult from_json(const nlohmann::json& json);
};

// The text of an error a builder's thread left (std::exception::what, or "unknown error").
std::string error_text(const std::exception_ptr& error);

}  // namespace sluice::runtime
