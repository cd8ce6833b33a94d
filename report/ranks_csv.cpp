#include "report/ranks_csv.h"

#include <map>
#include <optional>
#include <vector>

#include <spdlog/fmt/fmt.h>

namespace sluice::report {
namespace {

// RFC 4180: a field with a comma, a quote or a line break goes in quotes, its quotes doubled
// (host names and roles are the user's machine's words).
std::string field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string number(double value, int decimals) { return fmt::format("{:.{}f}", value, decimals); }
std::string milliseconds(double seconds) { return number(1000 * seconds, 3); }

struct Row {
  std::string host, role;
  int gpu = -1;
  const ModelRankAnalysis* model = nullptr;
  const DataRankAnalysis* data = nullptr;
  const RankCpu* cpu = nullptr;
};

constexpr const char* header =
    "rank,host,role,gpu,steady_steps,step_p50_ms,step_p95_ms,step_p99_ms,busy_p50_ms,input_wait,allreduce_exposed,"
    "gpu_busy,batches_sent,send_mb_per_s,cache_read,collate,credit_wait,send,ran,cpu_cores,storage_read_bytes\n";

std::string model_columns(const ModelRankAnalysis* m) {
  if (m == nullptr) return ",,,,,,,";
  return fmt::format("{},{},{},{},{},{},{},{}", m->steady_steps, milliseconds(m->step_seconds.p50),
                     milliseconds(m->step_seconds.p95), milliseconds(m->step_seconds.p99),
                     milliseconds(m->busy_seconds.p50), number(m->input_wait_fraction, 4),
                     number(m->allreduce_exposed_fraction, 4),
                     m->gpu_busy_fraction ? number(*m->gpu_busy_fraction, 4) : std::string());
}

std::string data_columns(const DataRankAnalysis* d) {
  if (d == nullptr) return ",,,,,";
  const auto share = [d](timing::Stage stage) {
    const auto it = d->stage_fraction.find(stage);
    return it == d->stage_fraction.end() ? std::string() : number(it->second, 4);
  };
  return fmt::format("{},{},{},{},{},{}", d->batches_sent, number(d->send_bandwidth / 1e6, 1),
                     share(timing::Stage::cache_read), share(timing::Stage::collate),
                     share(timing::Stage::credit_wait), share(timing::Stage::send));
}

std::string cpu_columns(const RankCpu* c) {
  if (c == nullptr || !c->measured) return ",,";
  return fmt::format("{},{},{}", number(c->ran_fraction, 4), number(c->cpu_cores_mean, 2),
                     c->storage_measured ? std::to_string(c->storage_read_bytes) : std::string());
}

}  // namespace

std::string ranks_csv(const TrainAnalysis& a) {
  std::map<int, Row> rows;
  for (const auto& c : a.cpu) {
    Row& row = rows[c.rank];
    row.host = c.host;
    row.role = c.role.recorded;
    row.cpu = &c;
  }
  for (const auto& m : a.model_ranks) {
    Row& row = rows[m.rank];
    row.host = m.host;
    row.gpu = m.gpu;
    row.model = &m;
    if (row.role.empty()) row.role = "model";
  }
  for (const auto& d : a.data_ranks) {
    Row& row = rows[d.rank];
    row.host = d.host;
    if (row.gpu < 0) row.gpu = d.gpu;
    row.data = &d;
    if (row.role.empty()) row.role = "data";
  }
  std::string out = header;
  for (const auto& [rank, row] : rows) {
    out += fmt::format("{},{},{},{},{},{},{}\n", rank, field(row.host), field(row.role),
                       row.gpu >= 0 ? std::to_string(row.gpu) : std::string(), model_columns(row.model),
                       data_columns(row.data), cpu_columns(row.cpu));
  }
  return out;
}

}  // namespace sluice::report
