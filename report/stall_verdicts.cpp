#include "report/stall_verdicts.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <tuple>

#include <spdlog/fmt/fmt.h>

#include "report/report_text.h"
#include "timing/stage.h"

namespace sluice::report {
namespace {

using nlohmann::json;

std::string setting_text(const json& settings, const std::string& key, const std::string& fallback = "?") {
  const json value = setting(settings, key);
  if (value.is_null()) return fallback;
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// A baseline bandwidth from any rank's summary (bytes/s), 0 when none was measured.
double baseline(const TrainAnalysis& a, const std::string& key) {
  for (const auto& t : a.timelines) {
    const auto it = t.summary.find(key);
    if (it != t.summary.end() && it->is_number()) return it->get<double>();
  }
  return 0;
}

const RankCpu* cpu_of(const TrainAnalysis& a, int rank) { return a.cpu_of(rank); }

// The first descheduled rank that feeds batches (a data rank, or one doing both), or null.
const RankCpu* descheduled_data_rank(const TrainAnalysis& a) {
  for (const auto& c : a.cpu) {
    if (c.descheduled && c.role.feeds_batches()) return &c;
  }
  return nullptr;
}

// The first descheduled rank that runs the model, or null.
const RankCpu* descheduled_model_rank(const TrainAnalysis& a) {
  for (const auto& c : a.cpu) {
    if (c.descheduled && c.role.runs_model()) return &c;
  }
  return nullptr;
}

void input_cause(const TrainAnalysis& a, const DataRankAnalysis* busiest, bool queued, StallVerdict& v);

StallVerdict input_verdict(const TrainAnalysis& a) {
  StallVerdict v(VerdictKind::input_bound);
  const double f = a.input_wait_fraction;
  v.severity = f >= input_bound_high ? Severity::high : Severity::moderate;
  // The data side: its busiest stage, and whether batches were waiting (queued or in credit_wait).
  const DataRankAnalysis* busiest = nullptr;
  double credit_wait = 0, reader_wait = 0, queue = 0;
  int queue_ranks = 0;
  for (const auto& d : a.data_ranks) {
    if (!busiest || d.busiest_fraction > busiest->busiest_fraction) busiest = &d;
    credit_wait += d.waiting_on_model_fraction;
    reader_wait += d.stage_fraction.at(Stage::wait_for_reader);
    if (d.queue_depth_mean) {
      queue += *d.queue_depth_mean;
      ++queue_ranks;
    }
  }
  const double n = std::max<double>(1, static_cast<double>(a.data_ranks.size()));
  credit_wait /= n;
  reader_wait /= n;
  const bool have_queue = queue_ranks > 0;
  const double queue_mean = have_queue ? queue / queue_ranks : 0;
  // Where the data ranks' main threads waited decides: for credits (batches ready, queued) or for
  // their readers (nothing ready). The queue-depth counter decides only when neither wait shows.
  const bool queued = credit_wait != reader_wait ? credit_wait > reader_wait : have_queue && queue_mean >= 1.0;
  v.numbers = {{"input_wait_fraction", f},
               {"transfer_exposed_fraction", a.transfer_exposed_fraction},
               {"data_waiting_on_model_fraction", credit_wait},
               {"data_wait_for_reader_fraction", reader_wait},
               {"batches_queued", queued}};
  if (have_queue) v.numbers["queue_depth_mean"] = queue_mean;
  std::string cause = "no data-rank timelines";
  if (busiest) {
    v.numbers["busiest_data_stage"] = stage_name(busiest->busiest_stage);
    v.numbers["busiest_data_stage_fraction"] = busiest->busiest_fraction;
    v.numbers["busiest_data_rank"] = busiest->rank;
    cause = fmt::format("busiest data-rank stage {} ({} of rank {}'s {}), batches {}queued (data ranks {} waiting on "
                        "their model ranks (credit_wait, unexposed send), {} in wait_for_reader{})",
                        stage_name(busiest->busiest_stage), percent(busiest->busiest_fraction), busiest->rank,
                        busiest->busiest_stage == Stage::cache_read || busiest->busiest_stage == Stage::collate
                            ? "reader time" : "main thread",
                        queued ? "" : "not ", percent(credit_wait), percent(reader_wait),
                        have_queue ? fmt::format(", mean queue depth {:.1f}", queue_mean) : "");
  }
  v.summary = fmt::format("model ranks waited for a batch {} of their step time (I/T; {} at least {}); {}", percent(f),
                          to_string(v.severity), percent(v.severity == Severity::high ? input_bound_high : input_bound_moderate), cause);
  if (busiest) v.rank = busiest->rank;
  input_cause(a, busiest, queued, v);
  return v;
}

// Whether the busiest data rank's readers waited for the cache's storage (the rule at
// storage_wait_cpu_share): its CPU facts when they did, null otherwise.
const RankCpu* waited_for_storage(const TrainAnalysis& a, const DataRankAnalysis& d) {
  if (d.busiest_stage != Stage::cache_read) return nullptr;
  const RankCpu* cpu = cpu_of(a, d.rank);
  if (!cpu || cpu->storage_read_bytes <= 0 || d.bytes_sent <= 0) return nullptr;
  if (static_cast<double>(cpu->storage_read_bytes) < storage_read_min_share * static_cast<double>(d.bytes_sent)) {
    return nullptr;
  }
  const double reading_cores = std::max(1, d.reader_lanes) * d.busiest_fraction;
  return cpu->storage_cpu_cores() < storage_wait_cpu_share * reading_cores ? cpu : nullptr;
}

// The busiest data rank's readers waited for the cache's storage (waited_for_storage): its rate,
// and the device as what to fix.
void storage_cause(const DataRankAnalysis& d, const RankCpu& storage, const std::string& readers, StallVerdict& v) {
  v.numbers["cause"] = "cache_storage";
  const double rate = storage_bytes_per_second(d, storage);
  v.numbers["storage_read_bytes"] = storage.storage_read_bytes;
  v.numbers["storage_bytes_per_s"] = rate;
  v.numbers["storage_cpu_cores"] = storage.storage_cpu_cores();
  v.numbers["bytes_sent"] = d.bytes_sent;
  v.numbers["reader_lanes"] = d.reader_lanes;
  v.summary += fmt::format("; rank {}'s readers waited for the cache's storage: it delivered {} ({} from the device "
                           "in the {:.1f} s window, {} of the {} it sent), the process used {:.2f} cores while it "
                           "read, its {} reader(s) {} in cache_read",
                           d.rank, bandwidth_text(rate),
                           bytes_text(static_cast<double>(storage.storage_read_bytes)), d.window_seconds,
                           percent(static_cast<double>(storage.storage_read_bytes) /
                               static_cast<double>(d.bytes_sent)),
                           bytes_text(static_cast<double>(d.bytes_sent)), storage.storage_cpu_cores(),
                           d.reader_lanes, percent(d.busiest_fraction));
  v.recommendation = fmt::format(
      "the device under the cache is the limit on host {}, not the readers' CPU, the transport or train.credits: put "
      "the cache on faster node-local storage (or copy it there before training), check the device (iostat -x) and "
      "any I/O limit on the job's cgroup (blkio / io.max); more reader threads (train.reader_threads, now {}) help "
      "only if the device serves parallel reads faster",
      d.host, readers);
}

// The cause of an input-bound run and what to do about it: a descheduled data rank, the feed
// (batches ready but late), the cache's storage, the readers' CPU, or another data-rank stage.
void input_cause(const TrainAnalysis& a, const DataRankAnalysis* busiest, bool queued, StallVerdict& v) {
  const std::string readers = setting_text(a.settings, "train.reader_threads");
  const std::string per_node = setting_text(a.settings, "roles.data_per_node");
  const std::string credits = setting_text(a.settings, "train.credits");
  if (const RankCpu* stopped = descheduled_data_rank(a)) {
    // A data rank that did not run holds its send spans open: the feed looks slow, the process was not running.
    v.rank = stopped->rank;
    v.numbers["cause"] = "descheduled";
    v.numbers["descheduled_rank"] = stopped->rank;
    v.summary += "; " + descheduled_cause(*stopped);
    v.recommendation = fmt::format("{}: its batches were late because the process was not running, not because of "
                                   "the transport (its send and credit_wait spans include the time it was stopped); "
                                   "see the descheduled verdict and fix that first, do not raise train.credits for this",
                                   descheduled_cause(*stopped));
  } else if (!busiest) {
    v.numbers["cause"] = "unknown";
    v.recommendation = "record timelines on the data ranks too to find which of their stages is slow";
  } else if (queued || busiest->busiest_stage == Stage::send) {
    v.numbers["cause"] = "feed";
    v.numbers["send_bytes_per_s"] = busiest->send_bandwidth;
    v.recommendation = fmt::format(
        "batches were ready but reached the model ranks late: the feed itself is the limit (send {} at {} on rank {}). "
        "Raise train.credits from {} so more batches are in flight, or use a faster transport (roles.transport)",
        percent(busiest->send_exposed_fraction), bandwidth_text(busiest->send_bandwidth), busiest->rank, credits);
  } else if (const RankCpu* storage = waited_for_storage(a, *busiest)) {
    storage_cause(*busiest, *storage, readers, v);
  } else if (busiest->busiest_stage == Stage::cache_read || busiest->busiest_stage == Stage::collate) {
    v.numbers["cause"] = stage_name(busiest->busiest_stage);
    v.recommendation = fmt::format(
        "the readers cannot keep up ({} threads {} busy in {}): raise train.reader_threads from {} (cores permitting), "
        "or add data ranks per node (roles.data_per_node from {})%s",
        busiest->reader_lanes, percent(busiest->busiest_fraction), stage_name(busiest->busiest_stage), readers, per_node);
    const std::string tail = busiest->busiest_stage == Stage::cache_read
                                 ? "; put the cache on node-local disk if it is on a network file system"
                                 : "; fewer padding frames (train.n_buckets up) make collating cheaper";
    v.recommendation.replace(v.recommendation.find("%s"), 2, tail);
  } else {
    v.numbers["cause"] = stage_name(busiest->busiest_stage);
    v.recommendation = fmt::format("the data ranks' {} stage takes {} of their time: move that work to the model ranks "
                                   "or add data ranks per node (roles.data_per_node from {})",
                                   stage_name(busiest->busiest_stage), percent(busiest->busiest_fraction), per_node);
  }
}

void allreduce_cause(const TrainAnalysis& a, bool model_straggler, double bytes_per_step, double exposed_per_step,
                     double baseline_step_s, StallVerdict& v);

// Whether the exposed communication is mostly the gradient all-reduce (else the batch transfer).
bool allreduce_exposed_most(const TrainAnalysis& a) {
  return a.allreduce_exposed_fraction >= a.transfer_exposed_fraction;
}

// The rate the exposed communication moved at: the all-reduce's bytes over its seconds, or the
// data ranks' sends over theirs.
double achieved_bytes_per_second(const TrainAnalysis& a, bool allreduce) {
  if (allreduce) {
    int64_t bytes = 0;
    double seconds = 0;
    for (const auto& m : a.model_ranks) {
      bytes += m.allreduce_bytes;
      seconds += m.allreduce_seconds;
    }
    return seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  }
  double sent = 0, seconds = 0;
  for (const auto& d : a.data_ranks) {
    sent += static_cast<double>(d.bytes_sent);
    if (d.send_bandwidth > 0) seconds += static_cast<double>(d.bytes_sent) / d.send_bandwidth;
  }
  return seconds > 0 ? sent / seconds : 0;
}

// `model_straggler`: a model-rank straggler verdict holds (a cause of all-reduce waits).
StallVerdict communication_verdict(const TrainAnalysis& a, bool model_straggler) {
  StallVerdict v(VerdictKind::communication_bound);
  const double comm = std::max(a.allreduce_exposed_fraction, a.transfer_exposed_fraction);
  v.severity = comm >= comm_bound_high ? Severity::high : Severity::moderate;
  const bool allreduce = allreduce_exposed_most(a);
  int64_t bytes = 0;
  for (const auto& m : a.model_ranks) bytes += m.allreduce_bytes;
  const double achieved = achieved_bytes_per_second(a, allreduce);
  const double base = baseline(a, allreduce ? "allreduce_baseline_bytes_per_s" : "transfer_baseline_bytes_per_s");
  // The all-reduce of one step against the time its bytes take at the baseline: a wait much
  // longer than that is not bandwidth but skew (slower peers) or progress (CPU MPI advances
  // non-blocking collectives only inside MPI calls).
  double exposed_s = 0, steps = 0;
  for (const auto& m : a.model_ranks) {
    const auto it = m.stages.find(Stage::allreduce_exposed);
    if (it != m.stages.end()) exposed_s += it->second.per_step.total;
    steps += static_cast<double>(m.steady_steps);
  }
  const double bytes_per_step = steps > 0 ? static_cast<double>(bytes) / steps : 0;
  const double exposed_per_step = steps > 0 ? exposed_s / steps : 0;
  const double baseline_step_s = base > 0 ? bytes_per_step / base : 0;
  v.numbers = {{"allreduce_exposed_fraction", a.allreduce_exposed_fraction},
               {"transfer_exposed_fraction", a.transfer_exposed_fraction},
               {"exposed", allreduce ? "allreduce" : "transfer"},
               {"achieved_bytes_per_s", achieved},
               {"baseline_bytes_per_s", base > 0 ? json(base) : json(nullptr)},
               {"allreduce_bytes_per_step", bytes_per_step},
               {"allreduce_exposed_seconds_per_step", exposed_per_step},
               {"allreduce_baseline_seconds_per_step", base > 0 ? json(baseline_step_s) : json(nullptr)}};
  const std::string against =
      base > 0 ? (allreduce ? fmt::format("the {} per step take {:.1f} ms at the measured baseline {}; the exposed "
                                          "wait is {:.1f} ms per step",
                                          bytes_text(bytes_per_step), 1e3 * baseline_step_s, bandwidth_text(base),
                                          1e3 * exposed_per_step)
                            : fmt::format("{} of the measured baseline {}", percent(achieved / base), bandwidth_text(base)))
               : "no baseline measured";
  v.summary = fmt::format("exposed {} is {} of model-rank step time ({} at least {}); achieved {} ({})",
                          allreduce ? "gradient all-reduce" : "batch transfer", percent(comm), to_string(v.severity),
                          percent(v.severity == Severity::high ? comm_bound_high : comm_bound_moderate),
                          bandwidth_text(achieved), against);
  if (allreduce) {
    allreduce_cause(a, model_straggler, bytes_per_step, exposed_per_step, baseline_step_s, v);
  } else {
    v.numbers["cause"] = "transfer";
    v.recommendation = fmt::format("batches spend {} of step time in transfer: raise train.credits from {} so the next "
                                   "batch moves while the current one trains, or use a faster transport "
                                   "(roles.transport)",
                                   percent(a.transfer_exposed_fraction), setting_text(a.settings, "train.credits"));
  }
  return v;
}

// Why the model ranks wait in the all-reduce, against the baseline measured at the run's start:
//  - no baseline: unknown;
//  - exposed wait at most allreduce_skew_ratio x what the step's bytes take at the baseline:
//    bandwidth as measured (cause "bandwidth");
//  - longer, and the model ranks' exposed waits uneven (the least below allreduce_even_share of
//    the most) or a model rank straggling or descheduled: they wait for each other ("skew");
//  - longer, even, on more than one host: the network carries less than at the start, a link
//    saturated or degraded since ("network_slower_than_baseline"), with the effective rate
//    bytes per step / exposed wait per step (at most what the link delivered);
//  - longer, even, on one host: "skew" (ranks on one host share memory, not a link).
// MPI progress alone cannot make the wait longer than the whole transfer at the baseline rate:
// once every rank waits inside the reduction, it moves at network speed.
void allreduce_cause(const TrainAnalysis& a, bool model_straggler, double bytes_per_step, double exposed_per_step,
                     double baseline_step_s, StallVerdict& v) {
  // Each host with the longest exposed wait per step of its model ranks: the order in which a
  // large run's text names them (named_list).
  std::map<std::string, double> host_wait;
  double least = -1, most = 0;
  for (const auto& m : a.model_ranks) {
    const auto it = m.stages.find(Stage::allreduce_exposed);
    const double per_step = it != m.stages.end() && m.steady_steps > 0
                                ? it->second.per_step.total / static_cast<double>(m.steady_steps)
                                : 0;
    double& wait = host_wait[m.host];
    wait = std::max(wait, per_step);
    least = least < 0 ? per_step : std::min(least, per_step);
    most = std::max(most, per_step);
  }
  std::vector<std::string> hosts;
  std::vector<NamedItem> named_hosts;
  for (const auto& [host, wait] : host_wait) {
    hosts.push_back(host);
    named_hosts.push_back({host, wait});
  }
  const bool even = most > 0 && least >= allreduce_even_share * most;
  const bool skew = !even || descheduled_model_rank(a) != nullptr || model_straggler;
  const double effective = exposed_per_step > 0 ? bytes_per_step / exposed_per_step : 0;
  v.numbers["hosts"] = hosts;
  v.numbers["exposed_least_seconds_per_step"] = std::max(0.0, least);
  v.numbers["exposed_most_seconds_per_step"] = most;
  const std::string host_list = named_list(named_hosts);
  const char* hide = "hide more of the all-reduce under backward (more, smaller gradient buckets start earlier), "
                     "accumulate gradients over more micro-steps (optim.accumulation) or use a larger batch per rank "
                     "so that each step communicates less per sample";
  if (baseline_step_s <= 0) {
    v.numbers["cause"] = "no_baseline";
    v.recommendation = hide;
  } else if (exposed_per_step <= allreduce_skew_ratio * baseline_step_s) {
    v.numbers["cause"] = "bandwidth";
    v.recommendation = hosts.size() > 1 ? fmt::format("the network between hosts {} is the limit at the rate the run "
                                                      "measured: {}; or a faster interconnect",
                                                      host_list, hide)
                                        : std::string(hide);
  } else if (skew || hosts.size() < 2) {
    v.numbers["cause"] = "skew";
    v.recommendation = "the exposed wait is more than twice what moving the gradients takes at the measured "
                       "bandwidth: the model ranks wait for each other (a slower rank, uneven batches), not for "
                       "the network; even out the ranks before tuning communication";
  } else {
    v.numbers["cause"] = "network_slower_than_baseline";
    v.numbers["effective_bytes_per_s"] = effective;
    v.summary += fmt::format("; every model rank waits alike and the all-reduce crosses hosts {}: the step's {} moved "
                             "at {} at most, against the {} measured at the start",
                             host_list, bytes_text(bytes_per_step), bandwidth_text(effective),
                             bandwidth_text(bytes_per_step / baseline_step_s));
    v.recommendation = fmt::format(
        "the network between hosts {} carries less than when the run started ({} at most, against {}): a link "
        "saturated by other traffic or degraded (check the switch ports and the links' error counters, `sluice doctor` "
        "on those nodes, other jobs on the same links); if not, the model ranks wait for each other. Until fixed: {}",
        host_list, bandwidth_text(effective), bandwidth_text(bytes_per_step / baseline_step_s), hide);
  }
}

StallVerdict compute_verdict(const TrainAnalysis& a) {
  StallVerdict v(VerdictKind::compute_bound);
  double busy = 0, total = 0;
  for (const auto& m : a.model_ranks) {
    busy += m.busy_seconds.total;
    total += m.steady_seconds;
  }
  double idle = 0;
  for (const auto& d : a.data_ranks) idle += d.waiting_on_model_fraction;
  idle /= std::max<double>(1, static_cast<double>(a.data_ranks.size()));
  v.numbers = {{"input_wait_fraction", a.input_wait_fraction},
               {"exposed_communication_fraction", std::max(a.allreduce_exposed_fraction, a.transfer_exposed_fraction)},
               {"busy_fraction", total > 0 ? busy / total : 0},
               {"data_waiting_on_model_fraction", idle}};
  v.summary = fmt::format("model ranks compute {} of their step time; input wait {} (< {}), exposed communication {} "
                          "(< {})",
                          percent(total > 0 ? busy / total : 0), percent(a.input_wait_fraction), percent(compute_bound_input_below),
                          percent(std::max(a.allreduce_exposed_fraction, a.transfer_exposed_fraction)),
                          percent(compute_bound_comm_below));
  v.recommendation = fmt::format(
      "the GPUs are fed: speed up the model step itself (mixed precision, fused kernels, a larger batch per rank) or add "
      "model ranks. The data ranks spend {} waiting on their model ranks (credit_wait, unexposed send){}",
      percent(idle), idle > 0.5 ? fmt::format(", so fewer data ranks would do (roles.data_per_node from {})",
                                          setting_text(a.settings, "roles.data_per_node"))
                            : "");
  return v;
}

// A model rank found by the step straggler rule, measured on `measure` (forward, or forward +
// backward + optimizer); `step` is the role's median step time.
StallVerdict model_straggler_verdict(const TrainAnalysis& a, const ModelRankAnalysis& m, const StragglerFinding& f,
                                     const std::string& measure, double step) {
  const double total_steps = static_cast<double>(m.recorded_steps);
  StallVerdict v(VerdictKind::straggler, f.median_excess >= 0.2 * step ? Severity::high : Severity::moderate, f.rank);
  v.role = RoleKind::model;
  v.numbers = {{"rank", f.rank},          {"host", m.host},
               {"gpu", m.gpu},            {"role", to_string(v.role)},
               {"measure", measure},
               {"busy_seconds_p50", f.rank_median},
               {"role_busy_seconds_p50", f.role_median},
               {"excess_seconds_per_step", f.median_excess},
               {"excess_fraction_of_step", step > 0 ? f.median_excess / step : 0},
               {"steps_over_threshold", f.flagged_share},
               {"steady_steps", f.items},
               {"cost_seconds_steady", f.total_excess},
               {"cost_seconds_projected", f.median_excess * total_steps},
               {"rule", f.rule},
               {"steps_with_excess", f.consistent_share}};
  const RankCpu* cpu = cpu_of(a, f.rank);
  if (cpu) {
    v.numbers["ran_fraction"] = cpu->ran_fraction;
    v.numbers["cpu_cores_mean"] = cpu->cpu_cores_mean;
  }
  v.summary = fmt::format("{} spends {:.3f} s per step in {} against {:.3f} s on the other model ranks (+{:.3f} s "
                          "over them in the same step, {} of the {:.3f} s step) in {} of {} steady steps; every other rank waits for it in the "
                          "all-reduce: {:.1f} s over the steady steps, about {:.1f} s over all {} steps",
                          m.name, f.rank_median, measure, f.role_median, f.median_excess,
                          percent(step > 0 ? f.median_excess / step : 0),
                          step, percent(f.flagged_share), f.items, f.total_excess, f.median_excess * total_steps,
                          m.recorded_steps);
  if (cpu) {
    v.summary += cpu->descheduled ? "; " + descheduled_cause(*cpu)
                                  : fmt::format("; it ran {} of the wall time, {:.2f} cores on average",
                                                percent(cpu->ran_fraction), cpu->cpu_cores_mean);
  }
  v.recommendation = fmt::format("look at host {} {}: another process on it, thermal or power throttling, a slower "
                                 "device or fewer CPU cores (`sluice doctor` on that node); until fixed, leave that "
                                 "node out of the allocation (removing it saves about {:.3f} s per step)",
                                 m.host, m.gpu >= 0 ? "GPU " + std::to_string(m.gpu) : "(CPU rank)", f.median_excess);
  return v;
}

// A model rank the step straggler rule found, and the measure it was found on.
struct ModelStraggler {
  StragglerFinding finding;
  std::string measure;  // "forward" or "forward+backward+optimizer"
};

std::vector<ModelStraggler> find_model_stragglers(const TrainAnalysis& a) {
  const double step = a.role_step_seconds.p50;
  // Every steady step of every model rank, one measure at a time: at 16,384 ranks a list is
  // ~100 MB, and the rule's own copies of it several times that.
  const auto steady_values = [&a](const std::function<double(const StepRecord&)>& measure) {
    std::vector<RankStepValue> values;
    for (const auto& m : a.model_ranks) {
      for (const auto& s : m.steps) {
        if (s.steady) values.push_back({m.rank, s.step, measure(s)});
      }
    }
    return values;
  };
  // Forward alone as well: on ranks whose gradient reduction blocks inside backward (CPU ranks
  // with MPI), the fast ranks' backward absorbs the wait for the slow one and the busy sums even
  // out; forward never waits on a peer.
  auto findings =
      find_step_stragglers(steady_values([](const StepRecord& s) { return s.stage(Stage::forward); }), step);
  std::map<int, std::string> measure;
  for (const auto& f : findings) measure[f.rank] = "forward";
  for (const auto& f : find_step_stragglers(steady_values([](const StepRecord& s) { return s.busy_seconds(); }), step)) {
    if (measure.count(f.rank)) continue;
    measure[f.rank] = "forward+backward+optimizer";
    findings.push_back(f);
  }
  std::vector<ModelStraggler> stragglers;
  for (const auto& f : findings) stragglers.push_back({f, measure.at(f.rank)});
  return stragglers;
}

std::vector<StallVerdict> model_straggler_verdicts(const TrainAnalysis& a, const std::vector<ModelStraggler>& found) {
  std::map<int, const ModelRankAnalysis*> models;
  for (const auto& m : a.model_ranks) models[m.rank] = &m;
  std::vector<StallVerdict> verdicts;
  for (const auto& [f, measure] : found) {
    verdicts.push_back(model_straggler_verdict(a, *models.at(f.rank), f, measure, a.role_step_seconds.p50));
  }
  return verdicts;
}

// Data ranks: read + collate seconds per batch, against the other data ranks.
std::vector<StallVerdict> data_straggler_verdicts(const TrainAnalysis& a) {
  std::map<int, std::vector<double>> data_busy;
  std::map<int, const DataRankAnalysis*> datas;
  for (const auto& d : a.data_ranks) {
    datas[d.rank] = &d;
    if (!d.batch_busy_seconds.empty()) data_busy[d.rank] = d.batch_busy_seconds;
  }
  std::vector<StallVerdict> verdicts;
  for (const auto& f : find_stragglers(data_busy, a.role_step_seconds.p50)) {
    const auto& d = *datas.at(f.rank);
    StallVerdict v(VerdictKind::straggler, Severity::moderate, f.rank);
    v.role = RoleKind::data;
    v.numbers = {{"rank", f.rank},
                 {"host", d.host},
                 {"gpu", d.gpu},
                 {"role", to_string(v.role)},
                 {"batch_seconds_p50", f.rank_median},
                 {"role_batch_seconds_p50", f.role_median},
                 {"excess_seconds_per_batch", f.median_excess},
                 {"batches_over_threshold", f.flagged_share},
                 {"batches", f.items},
                 {"cost_seconds_steady", f.total_excess}};
    v.summary = fmt::format("{} reads and collates a batch in {:.3f} s against {:.3f} s on the other data ranks in {} "
                            "of {} batches ({:.1f} s of reader time in all)",
                            d.name, f.rank_median, f.role_median, percent(f.flagged_share), f.items, f.total_excess);
    v.recommendation = fmt::format("check host {}'s path to the cache (local disk against network file system, page "
                                   "cache) and its CPU load; its model ranks ({}) wait for it only if input-bound",
                                   d.host, d.feeds.empty() ? std::string("none") : rank_list(d.feeds));
    verdicts.push_back(v);
  }
  return verdicts;
}

// A period the run is known to have: a setting, or the delay injected on purpose.
struct KnownPeriod {
  std::string what;
  double period;
};

// A delay put there on purpose comes first: when it shares a period with a setting, it is the cause.
std::vector<KnownPeriod> known_periods(const TrainAnalysis& a) {
  std::vector<KnownPeriod> known;
  if (a.injected_delay.is_object() && a.injected_delay.contains("every") && a.injected_delay["every"].is_number()) {
    known.push_back({"the injected delay's debug.delay_every", a.injected_delay["every"].get<double>()});
  }
  for (const char* key : {"train.checkpoint_every", "train.validation_every", "train.log_every"}) {
    const json value = setting(a.settings, key);
    if (value.is_number() && value.get<double>() > 0) known.push_back({key, value.get<double>()});
  }
  const json shard = setting(a.settings, "cache.shard_size"), batch = setting(a.settings, "train.batch_size");
  if (shard.is_number() && batch.is_number() && batch.get<double>() > 0) {
    known.push_back({"batches per shard (cache.shard_size / train.batch_size)", shard.get<double>() / batch.get<double>()});
  }
  return known;
}

// The stage that grows most in the spike steps ("" when none): over every model rank's analysed
// steps, or, when the analysis was capped (the spikes may lie before its window), over the job's
// per-step means.
std::string grown_stage(const TrainAnalysis& a, const CyclicStall& c) {
  std::string grown;
  double growth = 0;
  for (Stage stage : model_step_stages) {
    std::vector<double> spikes, normal;
    const auto add = [&](int64_t step, double seconds) {
      const bool spike = std::find(c.spike_steps.begin(), c.spike_steps.end(), step) != c.spike_steps.end();
      (spike ? spikes : normal).push_back(seconds);
    };
    if (a.steady.capped) {
      for (const auto& j : a.job_steps) {
        if (j.steady_ranks > 0) add(j.step, j.stage_seconds[model_stage_index(stage)]);
      }
    } else {
      for (const auto& m : a.model_ranks) {
        for (const auto& s : m.steps) {
          if (s.steady) add(s.step, s.stage(stage));
        }
      }
    }
    const double d = median(spikes) - median(normal);
    if (d > growth) {
      growth = d;
      grown = stage_name(stage);
    }
  }
  return grown;
}

// What to do about a stall every c.period steps, by the known period it matches ("" for none).
std::string cyclic_recommendation(const TrainAnalysis& a, const CyclicStall& c, const std::string& match,
                                  const std::string& grown) {
  const auto matches = [&](const char* what) { return match.rfind(what, 0) == 0; };
  if (matches("the injected delay")) {
    return "this is the delay put there on purpose (debug.delay_stage/delay_every): the report found it; unset "
           "debug.delay_stage for real runs";
  }
  if (matches("train.checkpoint_every")) {
    return fmt::format("checkpoints stall training {:.3f} s each: checkpoint less often (raise "
                       "train.checkpoint_every) or write them to faster storage",
                       c.spike_excess_seconds);
  }
  if (matches("train.validation_every")) {
    return "validation passes stall training: validate less often (train.validation_every) or on a smaller split "
           "(train.validation_fraction)";
  }
  if (matches("batches per shard")) {
    return fmt::format("the readers stall when they open the next shard: raise train.read_ahead from {} so the next "
                       "shard is read before it is needed",
                       setting_text(a.settings, "train.read_ahead"));
  }
  if (matches("train.log_every")) {
    return "logging stalls the step: the log line's gathering or printing blocks; report it as a bug";
  }
  return fmt::format("something recurring every {} steps{} costs {:.3f} s each time; look at the spike steps in "
                     "trace.json",
                     c.period, grown.empty() ? "" : " in " + grown, c.spike_excess_seconds);
}

StallVerdict cyclic_verdict(const TrainAnalysis& a, const CyclicStall& c) {
  StallVerdict v(VerdictKind::cyclic_stall, Severity::moderate);
  json known_json = json::array();
  std::string match;
  for (const auto& k : known_periods(a)) {
    const bool matches = std::fabs(k.period - static_cast<double>(c.period)) <= 1.0;
    known_json.push_back({{"what", k.what}, {"period", k.period}, {"matches", matches}});
    if (matches && match.empty()) match = fmt::format("{} = {:g}", k.what, k.period);
  }
  const std::string grown = grown_stage(a, c);
  v.numbers = {{"period", c.period},
               {"series", c.series},
               {"spikes", c.spike_steps.size()},
               {"spike_steps", c.spike_steps},
               {"gap_share", c.gap_share},
               {"autocorrelation", c.autocorrelation},
               {"autocorrelation_bound", c.autocorrelation_bound},
               {"threshold_seconds", c.threshold},
               {"spike_excess_seconds", c.spike_excess_seconds},
               {"grown_stage", grown},
               {"known_periods", known_json}};
  v.summary = fmt::format("every {} steps a step takes {:.3f} s longer ({} spikes, {} of gaps within L±1, "
                          "autocorrelation {:.2f} > {:.2f}){}; {}",
                          c.period, c.spike_excess_seconds, c.spike_steps.size(), percent(c.gap_share),
                          c.autocorrelation, c.autocorrelation_bound, grown.empty() ? "" : ", in " + grown,
                          match.empty() ? "no known period matches" : "matches " + match);
  v.recommendation = cyclic_recommendation(a, c, match, grown);
  return v;
}

StallVerdict hang_verdict(const TrainAnalysis& a) {
  StallVerdict v(VerdictKind::hang, Severity::high, a.hang.culprit);
  json ranks = json::array();
  for (const auto& f : a.hang.ranks) {
    ranks.push_back({{"rank", f.rank}, {"status", f.status}, {"waiting_for", f.waiting_for}, {"last_step", f.last_step}});
  }
  v.numbers = {{"culprit", a.hang.culprit},
               {"missing_ranks", a.hang.missing_ranks},
               {"ranks", ranks},
               {"channel_mismatches", a.hang.channel_mismatches}};
  v.summary = a.hang.culprit >= 0 ? "the run did not finish; the rank that never arrived: " + a.hang.culprit_reason
                                  : "the run did not finish and no rank names whom it waited for";
  std::string host;
  for (const auto& t : a.timelines) {
    if (t.rank == a.hang.culprit) host = t.host;
  }
  v.recommendation = a.hang.culprit >= 0
                         ? fmt::format("read rank {}'s log{} first (out of memory, a crash, a stuck file system); "
                                       "resume with --resume once fixed",
                                       a.hang.culprit, host.empty() ? "" : " on host " + host)
                         : "read the logs of the failed ranks listed below";
  return v;
}

}  // namespace

double storage_bytes_per_second(const DataRankAnalysis& d, const RankCpu& cpu) {
  const auto read = d.stage_fraction.find(Stage::cache_read);
  const double reading_s = d.window_seconds * (read == d.stage_fraction.end() ? 0 : read->second);
  return reading_s > 0 ? static_cast<double>(cpu.storage_read_bytes) / reading_s : 0;
}

json setting(const json& settings, const std::string& key) {
  if (!settings.is_object()) return nullptr;
  const auto flat = settings.find(key);
  if (flat != settings.end()) return *flat;
  const auto dot = key.find('.');
  if (dot == std::string::npos) return nullptr;
  const auto section = settings.find(key.substr(0, dot));
  if (section == settings.end() || !section->is_object()) return nullptr;
  const auto value = section->find(key.substr(dot + 1));
  return value == section->end() ? json(nullptr) : *value;
}

json StallVerdict::to_json() const {
  return {{"kind", to_string(kind)},  {"severity", to_string(severity)}, {"summary", summary},
          {"recommendation", recommendation}, {"numbers", numbers}, {"rank", rank}};
}

std::string StallVerdict::title() const {
  std::string name(to_string(kind));
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

std::string StallVerdict::headline() const {
  return title() + (severity == Severity::none ? "" : " " + std::string(to_string(severity))) + ": " + summary;
}

namespace {

std::vector<double> sorted(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values;
}

// One rank's values in step order, each with its residual against the other ranks in that step.
struct RankResiduals {
  int rank = 0;
  std::vector<double> residuals, values;
};

// Per step, the median of the OTHER ranks' values: the step's values sorted once, each rank's own
// value left out by its position (ranks x steps x log ranks, not ranks^2 x steps). A step that
// only one rank has gives no residual. `values` sorted by (rank, step), each pair once. Flat
// vectors, not maps: at 4,096 ranks this is a million values, and the maps' nodes were most of
// the straggler rule's time.
std::vector<RankResiduals> step_residuals(const std::vector<RankStepValue>& values) {
  struct Entry {
    int64_t step;
    double value;
    int rank;
    size_t at;  // index in `values`
  };
  std::vector<Entry> by_step(values.size());
  for (size_t i = 0; i < values.size(); ++i) by_step[i] = {values[i].step, values[i].value, values[i].rank, i};
  std::sort(by_step.begin(), by_step.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.step, a.value, a.rank) < std::tie(b.step, b.value, b.rank);
  });
  std::vector<double> residual(values.size());
  std::vector<char> has(values.size(), 0);
  for (size_t begin = 0, end = 0; begin < by_step.size(); begin = end) {
    while (end < by_step.size() && by_step[end].step == by_step[begin].step) ++end;
    const size_t n = end - begin;
    if (n < 2) continue;
    for (size_t i = 0; i < n; ++i) {
      const double others_median =
          median_of_ranked(n - 1, [&](size_t k) { return by_step[begin + (k < i ? k : k + 1)].value; });
      const Entry& e = by_step[begin + i];
      residual[e.at] = e.value - others_median;
      has[e.at] = 1;
    }
  }
  std::vector<RankResiduals> result;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!has[i]) continue;
    if (result.empty() || result.back().rank != values[i].rank) result.push_back({values[i].rank, {}, {}});
    result.back().residuals.push_back(residual[i]);
    result.back().values.push_back(values[i].value);
  }
  return result;
}

}  // namespace

std::vector<StragglerFinding> find_stragglers(const std::map<int, std::vector<double>>& per_rank,
                                              double reference_seconds) {
  std::vector<StragglerFinding> findings;
  if (per_rank.size() < 2) return findings;
  std::vector<double> pool;
  for (const auto& [rank, values] : per_rank) pool.insert(pool.end(), values.begin(), values.end());
  const LeaveOutSample all(std::move(pool));
  for (const auto& [rank, values] : per_rank) {
    if (values.empty() || all.size() == values.size()) continue;
    const std::vector<double> mine = sorted(values);
    const double center = all.median_without(mine);
    // A MAD of zero (identical values) would make every difference infinitely significant; the
    // floor keeps the rule on the 5% excess then.
    const double mad = std::max(all.mad_without(mine, center), std::max(1e-9, 1e-4 * center));
    const double min_excess = straggler_min_excess * (reference_seconds > 0 ? reference_seconds : center);
    size_t flagged = 0;
    double total_excess = 0;
    for (double v : values) {
      if (modified_z(v, center, mad) > straggler_z && v - center >= min_excess) ++flagged;
      total_excess += std::max(0.0, v - center);
    }
    const double share = static_cast<double>(flagged) / static_cast<double>(values.size());
    if (share < straggler_min_item_share) continue;
    StragglerFinding f;
    f.rank = rank;
    f.items = values.size();
    f.flagged_share = share;
    f.rank_median = median(values);
    f.role_median = center;
    f.median_excess = f.rank_median - center;
    f.total_excess = total_excess;
    findings.push_back(f);
  }
  return findings;
}

std::vector<StragglerFinding> find_step_stragglers(std::vector<RankStepValue> values, double reference_seconds) {
  std::vector<StragglerFinding> findings;
  // Rank order, then step order; of a (rank, step) given twice the last one given counts.
  std::stable_sort(values.begin(), values.end(), [](const RankStepValue& a, const RankStepValue& b) {
    return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
  });
  size_t kept = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const bool replaced = i + 1 < values.size() && values[i + 1].rank == values[i].rank && values[i + 1].step == values[i].step;
    if (!replaced) values[kept++] = values[i];
  }
  values.resize(kept);
  if (values.empty() || values.front().rank == values.back().rank) return findings;  // fewer than two ranks
  // residual e = value - median of the other ranks' values in that step
  const std::vector<RankResiduals> per_rank = step_residuals(values);
  std::vector<RankStepValue>().swap(values);  // per_rank holds what is needed from here
  std::vector<double> residual_pool, value_pool;
  for (const auto& r : per_rank) {
    residual_pool.insert(residual_pool.end(), r.residuals.begin(), r.residuals.end());
    value_pool.insert(value_pool.end(), r.values.begin(), r.values.end());
  }
  const LeaveOutSample all_residuals(std::move(residual_pool)), all_values(std::move(value_pool));
  for (const auto& r : per_rank) {
    const int rank = r.rank;
    const std::vector<double>& mine = r.residuals;
    if (mine.empty() || all_residuals.size() == mine.size()) continue;
    const std::vector<double> mine_sorted = sorted(mine), my_values = sorted(r.values);
    const double scale_center = all_residuals.median_without(mine_sorted);
    const double role_median = all_values.median_without(my_values);
    const double reference = reference_seconds > 0 ? reference_seconds : role_median;
    const double mad =
        std::max(all_residuals.mad_without(mine_sorted, scale_center), std::max(1e-9, 1e-4 * reference));
    size_t flagged = 0, consistent = 0;
    double total_excess = 0;
    for (double e : mine) {
      if (modified_z(e, 0, mad) > straggler_z && e >= straggler_min_excess * reference) ++flagged;
      consistent += e >= straggler_min_excess * reference ? 1 : 0;
      total_excess += std::max(0.0, e);
    }
    const double share = static_cast<double>(flagged) / static_cast<double>(mine.size());
    const double consistent_share = static_cast<double>(consistent) / static_cast<double>(mine.size());
    const double rank_median = median(r.values);
    const bool by_z = share >= straggler_min_item_share;
    const bool by_ratio = consistent_share >= straggler_consistent_share && role_median > 0 &&
                          rank_median >= straggler_min_ratio * role_median;
    if (!by_z && !by_ratio) continue;
    StragglerFinding f;
    f.rank = rank;
    f.items = mine.size();
    f.flagged_share = by_z ? share : consistent_share;
    f.consistent_share = consistent_share;
    f.rule = by_z ? "z" : "ratio";
    f.rank_median = rank_median;
    f.role_median = role_median;
    f.median_excess = median(mine);
    f.total_excess = total_excess;
    findings.push_back(f);
  }
  return findings;
}

CyclicStall find_cyclic_stall(const std::vector<double>& seconds, const std::vector<int64_t>& steps,
                              double min_excess) {
  CyclicStall c;
  if (seconds.size() < min_steady_steps) return c;
  const double center = median(seconds);
  const double mad = median_absolute_deviation(seconds, center);
  c.threshold = std::max(center + spike_z * 1.4826 * mad, center + min_excess);
  std::vector<size_t> spike_index;
  std::vector<double> spike_values;
  for (size_t i = 0; i < seconds.size(); ++i) {
    if (seconds[i] > c.threshold) {
      spike_index.push_back(i);
      c.spike_steps.push_back(steps[i]);
      spike_values.push_back(seconds[i]);
    }
  }
  c.spike_excess_seconds = spike_values.empty() ? 0 : median(spike_values) - center;
  c.autocorrelation_bound = 3.0 / std::sqrt(static_cast<double>(seconds.size()));
  if (spike_index.size() < cyclic_min_spikes) return c;
  std::map<int64_t, int> gap_counts;
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < spike_index.size(); ++i) {
    const auto gap = static_cast<int64_t>(spike_index[i] - spike_index[i - 1]);
    gaps.push_back(gap);
    ++gap_counts[gap];
  }
  int most = 0;
  for (const auto& [gap, count] : gap_counts) {
    if (count > most) {
      most = count;
      c.period = gap;
    }
  }
  size_t near = 0;
  for (int64_t g : gaps) near += std::llabs(g - c.period) <= 1 ? 1 : 0;
  c.gap_share = static_cast<double>(near) / static_cast<double>(gaps.size());
  c.autocorrelation = autocorrelation(seconds, static_cast<size_t>(c.period));
  c.found = c.period >= 2 && c.gap_share >= cyclic_min_gap_share && c.autocorrelation > c.autocorrelation_bound;
  return c;
}

namespace {

// Too few steady steps for the rules: what the run had and what it needs.
StallVerdict thin_run_verdict(const TrainAnalysis& a) {
  StallVerdict v(VerdictKind::no_verdict);
  v.summary = a.model_ranks.empty()
                  ? "no model-rank timelines, so no step times to judge"
                  : fmt::format("only {} steady steps after dropping {} warm-up steps; the rules need at least {}",
                                a.steady.steady_steps, a.steady.warmup_steps, min_steady_steps);
  v.recommendation = fmt::format("run at least {} steps (train.steps) for a verdict",
                                 a.steady.warmup_steps + min_steady_steps + 5);
  v.numbers = {{"steady_steps", a.steady.steady_steps}, {"warmup_steps", a.steady.warmup_steps},
               {"required", min_steady_steps}};
  return v;
}

// The all-reduce is where the other model ranks wait for a descheduled or straggling one: its
// cost shows up in the communication verdict, which says so and puts fixing that rank first.
void blame_slow_model_rank(const TrainAnalysis& a, const StragglerFinding* straggler, StallVerdict& v) {
  if (const RankCpu* stopped = descheduled_model_rank(a)) {
    v.summary += "; " + descheduled_cause(*stopped) + ", and the others wait for it there";
    v.recommendation = fmt::format("rank {} did not run most of the time (see descheduled): fix that first; beyond "
                                   "it: ", stopped->rank) + v.recommendation;
    v.numbers["descheduled_rank"] = stopped->rank;
  }
  if (straggler) {
    v.summary += fmt::format("; the other ranks wait there for straggler rank {} (+{:.3f} s per step)", straggler->rank,
                             straggler->median_excess);
    v.recommendation = fmt::format("fix the straggler (rank {}) first, then look at the all-reduce again; beyond it: ",
                                   straggler->rank) + v.recommendation;
    v.numbers["straggler_rank"] = straggler->rank;
  }
}

// The job's series over every steady step recorded, not only the analysed window (the same steps
// when the run is not capped): a period of hundreds of steps (train.checkpoint_every) shows only
// over thousands. The step time first; then each stage's own series, where a stall hides less
// behind a noisy or two-level step time (a CPU run whose steps alternate between two lengths,
// say). A stage's series is its mean over the ranks on which the step is steady.
CyclicStall job_cyclic_stall(const TrainAnalysis& a) {
  std::vector<double> series;
  std::vector<int64_t> steps;
  for (const auto& j : a.job_steps) {
    if (j.step >= a.steady.recorded_first_step && j.step <= a.steady.recorded_last_step) {
      steps.push_back(j.step);
      series.push_back(j.seconds);
    }
  }
  const double min_excess = 0.05 * median(series);
  CyclicStall cyclic = find_cyclic_stall(series, steps, min_excess);
  for (size_t k = 0; !cyclic.found && k < model_step_stages.size(); ++k) {
    std::vector<double> stage_series;
    std::vector<int64_t> stage_steps;
    for (const auto& j : a.job_steps) {
      if (j.steady_ranks == 0) continue;
      stage_steps.push_back(j.step);
      stage_series.push_back(j.stage_seconds[k]);
    }
    CyclicStall candidate = find_cyclic_stall(stage_series, stage_steps, min_excess);
    if (candidate.found) {
      candidate.series = stage_name(model_step_stages[k]);
      cyclic = candidate;
    }
  }
  return cyclic;
}

double exposed_communication(const TrainAnalysis& a) {
  return std::max(a.allreduce_exposed_fraction, a.transfer_exposed_fraction);
}

// The rules that need steady steps, in their order within a grade: input, communication,
// straggler, cyclic, compute.
void steady_state_verdicts(const TrainAnalysis& a, std::vector<StallVerdict>& verdicts) {
  if (a.input_wait_fraction >= input_bound_moderate) verdicts.push_back(input_verdict(a));
  const std::vector<ModelStraggler> model_stragglers = find_model_stragglers(a);
  const StragglerFinding* first = model_stragglers.empty() ? nullptr : &model_stragglers.front().finding;
  if (exposed_communication(a) >= comm_bound_moderate) {
    StallVerdict v = communication_verdict(a, first != nullptr);
    if (allreduce_exposed_most(a)) blame_slow_model_rank(a, first, v);
    verdicts.push_back(v);
  }
  for (auto& v : model_straggler_verdicts(a, model_stragglers)) verdicts.push_back(v);
  for (auto& v : data_straggler_verdicts(a)) verdicts.push_back(v);
  if (const CyclicStall cyclic = job_cyclic_stall(a); cyclic.found) verdicts.push_back(cyclic_verdict(a, cyclic));
  if (a.input_wait_fraction < compute_bound_input_below && exposed_communication(a) < compute_bound_comm_below) {
    verdicts.push_back(compute_verdict(a));
  }
}

}  // namespace

std::vector<StallVerdict> train_verdicts(const TrainAnalysis& a) {
  std::vector<StallVerdict> verdicts;
  if (a.hang.any) verdicts.push_back(hang_verdict(a));
  for (const auto& c : a.cpu) {
    if (c.descheduled) verdicts.push_back(descheduled_verdict(a, c));
  }
  if (!a.steady.enough) {
    // Not graded against each other: what the run could be judged on, in this order.
    verdicts.push_back(thin_run_verdict(a));
    if (auto padding = padding_verdict(a.padding)) verdicts.push_back(*padding);
    if (auto restarts = restart_verdict(a.restarts)) verdicts.push_back(*restarts);
    return verdicts;
  }
  steady_state_verdicts(a, verdicts);
  if (auto padding = padding_verdict(a.padding)) verdicts.push_back(*padding);
  if (auto restarts = restart_verdict(a.restarts)) verdicts.push_back(*restarts);
  // HIGH before MODERATE before ungraded; the rule order above within a grade.
  std::stable_sort(verdicts.begin(), verdicts.end(),
                   [](const StallVerdict& x, const StallVerdict& y) { return x.severity > y.severity; });
  return verdicts;
}

}  // namespace sluice::report
