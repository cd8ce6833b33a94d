#include "runtime/prep/rank_result.h"

#include "common/error.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

// Whether the machine refused (a full disk, a read-only file system, memory or a thread under a
// limit), which has its own exit code.
bool is_environment_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::environment;
  } catch (const std::exception& e) {
    return machine_refusal(e).has_value();
  } catch (...) {
    return false;
  }
}

}  // namespace

std::string error_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    if (const auto refusal = machine_refusal(e)) return refusal->what();
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

PrepRankResult PrepRankResult::from_build(const BuildResult& result, int rank, const std::string& host) {
  PrepRankResult out;
  out.rank = rank;
  out.host = host;
  out.ok = !result.error;
  if (result.error) {
    out.error = error_text(result.error);
    out.environment_error = is_environment_error(result.error);
  }
  out.shards = result.shards;
  for (const auto& shard : result.shards) out.shards_kept += shard.kept ? 1 : 0;
  out.samples = result.samples;
  out.rejects = result.rejects;
  out.frames = result.frames;
  out.audio_seconds = result.audio_seconds;
  out.reject_reasons = result.reject_reasons;
  out.unknown = result.unknown;
  out.wall_seconds = result.wall_seconds;
  out.stages = result.stages;
  out.cpu = result.cpu;
  out.writer = result.writer;
  return out;
}

json PrepRankResult::to_json() const {
  json shard_rows = json::array();
  for (const auto& shard : shards) shard_rows.push_back({shard.shard, shard.kept, shard.samples, shard.rejects});
  json unknown_counts = json::object();
  for (const auto& [code_point, count] : unknown) unknown_counts[std::to_string(code_point)] = count;
  return {{"rank", rank},
          {"host", host},
          {"ok", ok},
          {"error", error},
          {"error_kind", environment_error ? "environment" : ""},
          {"shards", shard_rows},
          {"shards_kept", shards_kept},
          {"samples", samples},
          {"rejects", rejects},
          {"frames", frames},
          {"audio_seconds", audio_seconds},
          {"reject_reasons", reject_reasons},
          {"unknown", unknown_counts},
          {"wall_seconds", wall_seconds},
          {"stages",
           {{"decode", stages.decode}, {"text", stages.text}, {"features", stages.features}, {"write", stages.write}}},
          {"cpu_seconds", {{"workers", cpu.workers}, {"writer", cpu.writer}}},
          {"workers", writer.workers},
          {"mel_bytes", writer.mel_bytes}};
}

PrepRankResult PrepRankResult::from_json(const json& in) {
  PrepRankResult out;
  out.rank = in.at("rank").get<int>();
  out.host = in.at("host").get<std::string>();
  out.ok = in.at("ok").get<bool>();
  out.error = in.at("error").get<std::string>();
  out.environment_error = in.at("error_kind").get<std::string>() == "environment";
  for (const auto& row : in.at("shards")) {
    out.shards.push_back({row[0].get<int64_t>(), row[1].get<bool>(), row[2].get<int64_t>(), row[3].get<int64_t>()});
  }
  out.shards_kept = in.at("shards_kept").get<int64_t>();
  out.samples = in.at("samples").get<int64_t>();
  out.rejects = in.at("rejects").get<int64_t>();
  out.frames = in.at("frames").get<int64_t>();
  out.audio_seconds = in.at("audio_seconds").get<double>();
  out.reject_reasons = in.at("reject_reasons").get<std::map<std::string, int64_t>>();
  for (const auto& [code_point, count] : in.at("unknown").items()) {
    out.unknown[static_cast<char32_t>(std::stoul(code_point))] = count.get<int64_t>();
  }
  out.wall_seconds = in.at("wall_seconds").get<double>();
  const json& stages = in.at("stages");
  out.stages = {stages.at("decode").get<double>(), stages.at("text").get<double>(), stages.at("features").get<double>(),
                stages.at("write").get<double>()};
  const json cpu = in.value("cpu_seconds", json::object());
  out.cpu = {cpu.value("workers", 0.0), cpu.value("writer", 0.0)};
  out.writer = {in.value("workers", 0), in.value("mel_bytes", int64_t{0})};
  return out;
}

}  // namespace sluice::runtime
