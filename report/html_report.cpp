#include "report/html_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <spdlog/fmt/fmt.h>

#include "report/report_document.h"
#include "report/report_documents.h"
#include "report/report_text.h"

namespace sluice::report {
namespace {

constexpr const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
std::string color(size_t i) { return palette[i % (sizeof(palette) / sizeof(palette[0]))]; }

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;
};

constexpr double chart_width = 860, chart_height = 260, left = 60, right = 20, top = 30, bottom = 40;

std::string axis(double x_min, double x_max, double y_min, double y_max, const std::string& x_label,
                 const std::string& y_label) {
  std::string svg;
  const double w = chart_width - left - right, h = chart_height - top - bottom;
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#888'/>", left, top + h, left + w, top + h);
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#888'/>", left, top, left, top + h);
  for (int i = 0; i <= 4; ++i) {
    const double y = top + h - h * i / 4.0, value = y_min + (y_max - y_min) * i / 4.0;
    svg += fmt::format("<text x='{}' y='{}' class='tick' text-anchor='end'>{:.3g}</text>", left - 4, y + 4, value);
    const double x = left + w * i / 4.0, xv = x_min + (x_max - x_min) * i / 4.0;
    svg += fmt::format("<text x='{}' y='{}' class='tick' text-anchor='middle'>{:.4g}</text>", x, top + h + 14, xv);
  }
  svg += fmt::format("<text x='{}' y='{}' class='label' text-anchor='middle'>{}</text>", left + w / 2,
                     chart_height - 6, html_escape(x_label));
  svg += fmt::format("<text x='12' y='{}' class='label' transform='rotate(-90 12 {})' text-anchor='middle'>{}</text>",
                     top + h / 2, top + h / 2, html_escape(y_label));
  return svg;
}

std::string legend(const std::vector<std::string>& labels) {
  std::string html = "<div class='legend'>";
  for (size_t i = 0; i < labels.size(); ++i) {
    html += fmt::format("<span class='key' data-series='{}'><i style='background:{}'></i>{}</span>", html_escape(labels[i]),
                        color(i), html_escape(labels[i]));
  }
  return html + "</div>";
}

// At most this many points per polyline: a long run's series is cut into this many bins and each
// bin keeps its first and its highest point, so that spikes survive and the page stays small.
constexpr size_t max_points = 1500;

std::vector<std::pair<double, double>> thin(const std::vector<std::pair<double, double>>& points) {
  if (points.size() <= max_points) return points;
  std::vector<std::pair<double, double>> kept;
  const size_t bin = (points.size() + max_points / 2 - 1) / (max_points / 2);
  for (size_t start = 0; start < points.size(); start += bin) {
    const size_t end = std::min(points.size(), start + bin);
    const auto peak = std::max_element(points.begin() + static_cast<long>(start), points.begin() + static_cast<long>(end),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    kept.push_back(points[start]);
    if (peak != points.begin() + static_cast<long>(start)) kept.push_back(*peak);
  }
  return kept;
}

// `shade_until`: x values below it are drawn on a grey band (the warm-up steps left out of the
// verdicts); NAN for none.
std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label, bool steps_shape = false, double shade_until = NAN) {
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  }
  std::string html = "<h3>" + html_escape(title) + "</h3>";
  if (!std::isfinite(x_min)) return html + "<p class='empty'>no data recorded</p>";
  if (x_max <= x_min) x_max = x_min + 1;
  if (y_max <= 0) y_max = 1;
  y_max *= 1.05;
  const double w = chart_width - left - right, h = chart_height - top - bottom;
  html += fmt::format("<svg class='chart' width='{}' height='{}' viewBox='0 0 {} {}'>", chart_width, chart_height,
                      chart_width, chart_height);
  if (std::isfinite(shade_until) && shade_until > x_min) {
    const double band = w * (std::min(shade_until, x_max) - x_min) / (x_max - x_min);
    html += fmt::format("<rect x='{}' y='{}' width='{:.1f}' height='{}' fill='#eee'><title>warm-up: not in the "
                        "verdicts</title></rect>",
                        left, top, band, h);
  }
  html += axis(x_min, x_max, 0, y_max, x_label, y_label);
  std::vector<std::string> labels;
  for (size_t i = 0; i < series.size(); ++i) {
    labels.push_back(series[i].label);
    std::string points;
    double last_y = -1;
    for (const auto& [x, y] : thin(series[i].points)) {
      const double px = left + w * (x - x_min) / (x_max - x_min), py = top + h - h * y / y_max;
      if (steps_shape && last_y >= 0) points += fmt::format("{:.1f},{:.1f} ", px, last_y);
      points += fmt::format("{:.1f},{:.1f} ", px, py);
      last_y = py;
    }
    html += fmt::format("<polyline data-line='{}' fill='none' stroke='{}' stroke-width='1.2' points='{}'><title>{}</title>"
                        "</polyline>",
                        html_escape(series[i].label), color(i), points, html_escape(series[i].label));
  }
  return html + "</svg>" + legend(labels);
}

struct Bar {
  std::string label;
  std::vector<std::pair<std::string, double>> parts;  // (stage, value)
};

std::string stacked_bars(const std::string& title, const std::vector<Bar>& bars, const std::string& unit) {
  std::string html = "<h3>" + html_escape(title) + "</h3>";
  if (bars.empty()) return html + "<p class='empty'>no data recorded</p>";
  std::vector<std::string> keys;
  double max_total = 0;
  for (const auto& b : bars) {
    double total = 0;
    for (const auto& [key, value] : b.parts) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      total += value;
    }
    max_total = std::max(max_total, total);
  }
  if (max_total <= 0) max_total = 1;
  const double label_width = 260, bar_height = 22, width = chart_width - label_width - 80;
  const double height = static_cast<double>(bars.size()) * (bar_height + 8) + 10;
  html += fmt::format("<svg class='chart' width='{}' height='{}' viewBox='0 0 {} {}'>", chart_width, height, chart_width,
                      height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = 5 + static_cast<double>(i) * (bar_height + 8);
    html += fmt::format("<text x='{}' y='{}' class='tick' text-anchor='end'>{}</text>", label_width - 6,
                        y + bar_height / 2 + 4, html_escape(bars[i].label));
    double x = label_width, total = 0;
    for (const auto& [key, value] : bars[i].parts) {
      const size_t k = static_cast<size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
      const double bw = width * value / max_total;
      html += fmt::format("<rect data-line='{}' x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'><title>{}: {:.4g} "
                          "{}</title></rect>",
                          html_escape(key), x, y, bw, bar_height, color(k), html_escape(key), value, html_escape(unit));
      x += bw;
      total += value;
    }
    html += fmt::format("<text x='{:.1f}' y='{}' class='tick'>{:.4g} {}</text>", x + 4, y + bar_height / 2 + 4, total,
                        html_escape(unit));
  }
  return html + "</svg>" + legend(keys);
}

// Above full_table_ranks bars (AT SCALE): one bar of each part's median over every bar, then the
// worst_ranks_shown bars with the largest (Worst::highest) or smallest total, worst first; the
// title says so.
std::vector<Bar> bound_bars(std::vector<Bar> bars, Worst worst, std::string& title) {
  if (bars.size() <= full_table_ranks) return bars;
  const auto total = [](const Bar& b) {
    double sum = 0;
    for (const auto& part : b.parts) sum += part.second;
    return sum;
  };
  Bar median{fmt::format("median of {} ranks", bars.size()), {}};
  std::vector<std::string> keys;
  for (const auto& b : bars) {
    for (const auto& part : b.parts) {
      if (std::find(keys.begin(), keys.end(), part.first) == keys.end()) keys.push_back(part.first);
    }
  }
  for (const auto& key : keys) {
    std::vector<double> values;
    for (const auto& b : bars) {
      double value = 0;
      for (const auto& part : b.parts) {
        if (part.first == key) value = part.second;
      }
      values.push_back(value);
    }
    std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
    median.parts.emplace_back(key, values[values.size() / 2]);
  }
  title += fmt::format(": the median of {} ranks and the {} with the {} total", bars.size(), worst_ranks_shown,
                       worst == Worst::highest ? "largest" : "smallest");
  std::stable_sort(bars.begin(), bars.end(), [&](const Bar& x, const Bar& y) {
    return worst == Worst::highest ? total(x) > total(y) : total(x) < total(y);
  });
  bars.resize(worst_ranks_shown);
  bars.insert(bars.begin(), median);
  return bars;
}

std::string histogram(const std::string& title, const std::vector<double>& values, const std::string& x_label) {
  std::string html = "<h3>" + html_escape(title) + "</h3>";
  if (values.empty()) return html + "<p class='empty'>no data recorded</p>";
  const double lo = *std::min_element(values.begin(), values.end());
  double hi = *std::max_element(values.begin(), values.end());
  if (hi <= lo) hi = lo + 1e-3;
  const size_t bins = 30;
  std::vector<double> counts(bins, 0);
  for (double v : values) counts[std::min(bins - 1, static_cast<size_t>((v - lo) / (hi - lo) * bins))] += 1;
  const double peak = *std::max_element(counts.begin(), counts.end()) * 1.05;
  const double w = chart_width - left - right, h = chart_height - top - bottom;
  html += fmt::format("<svg class='chart' width='{}' height='{}' viewBox='0 0 {} {}'>", chart_width, chart_height,
                      chart_width, chart_height);
  html += axis(lo, hi, 0, peak, x_label, "count");
  for (size_t i = 0; i < bins; ++i) {
    const double bh = h * counts[i] / peak;
    html += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'><title>{:.4g}–{:.4g}: {:.0f}"
                        "</title></rect>",
                        left + w * static_cast<double>(i) / bins, top + h - bh, w / bins - 1, bh, color(0),
                        lo + (hi - lo) * static_cast<double>(i) / bins, lo + (hi - lo) * static_cast<double>(i + 1) / bins,
                        counts[i]);
  }
  return html + "</svg>";
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>" + html_escape(title) +
         "</title><style>"
         "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:960px}"
         "h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:14px;margin:18px 0 4px}"
         ".verdict{border-left:4px solid #e15759;padding:6px 10px;margin:8px 0;background:#fbf3f3}"
         ".verdict.MODERATE{border-color:#f28e2b;background:#fdf7ef}.verdict.none{border-color:#59a14f;background:#f3f9f2}"
         ".rec{color:#444}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;"
         "text-align:right}td:first-child,th:first-child{text-align:left}.tick{font-size:10px;fill:#555}"
         ".label{font-size:11px;fill:#333}.legend{font-size:12px}.key{margin-right:12px;cursor:pointer}"
         ".key i{display:inline-block;width:10px;height:10px;margin-right:4px}.key.off{opacity:.35}"
         "</style></head><body>\n" +
         body +
         "<p id='script-status'></p>\n<script>\n"
         "(function(){\n"
         "  // Clicking a legend key hides or shows its series in the same chart block.\n"
         "  document.querySelectorAll('.key').forEach(function(key){\n"
         "    key.addEventListener('click', function(){\n"
         "      var name = key.getAttribute('data-series');\n"
         "      key.classList.toggle('off');\n"
         "      document.querySelectorAll('[data-line]').forEach(function(el){\n"
         "        if (el.getAttribute('data-line') === name) el.style.display = key.classList.contains('off') ? 'none' : '';\n"
         "      });\n"
         "    });\n"
         "  });\n"
         "  var charts = document.querySelectorAll('svg.chart').length;\n"
         "  document.getElementById('script-status').textContent = charts + ' charts; click a legend key to hide it';\n"
         "  document.body.dataset.ready = '1';\n"
         "})();\n</script></body></html>\n";
}

// The verdicts as boxes coloured by severity (the CSS of page()).
std::string verdict_boxes(const std::vector<StallVerdict>& verdicts) {
  std::string html;
  if (verdicts.empty()) html += "<div class='verdict none'>No rule fired.</div>";
  for (size_t i = 0; i < std::min(verdicts.size(), verdicts_shown); ++i) {
    const StallVerdict& v = verdicts[i];
    const std::string severity(to_string(v.severity));
    html += fmt::format("<div class='verdict {}'><b>{} {}</b>: {}<div class='rec'>what to do: {}</div></div>",
                        severity.empty() ? "none" : severity, html_escape(v.title()), html_escape(severity),
                        html_escape(v.summary), html_escape(v.recommendation));
  }
  const std::string more = more_verdicts_text(verdicts);
  if (!more.empty()) html += "<p>" + html_escape(more) + "</p>";
  return html;
}

// Step time per model rank over the steps (and, when capped, the job's mean over every step).
// Above full_table_ranks model ranks (report_documents.h, AT SCALE): per global step the median,
// p95 and slowest of the model ranks' step times, and the worst_chart_ranks slowest ranks (by
// median step) as their own lines; a chart of thousands of lines shows nothing.
constexpr size_t worst_chart_ranks = 3;

std::vector<Series> step_time_bands(const TrainAnalysis& a) {
  std::map<int64_t, std::vector<double>> per_step;
  for (const auto& m : a.model_ranks) {
    for (const auto& r : m.steps) per_step[r.step].push_back(r.seconds);
  }
  Series median{"median of the model ranks", {}}, p95{"p95 of the model ranks", {}}, slowest{"slowest model rank", {}};
  for (auto& [step, values] : per_step) {
    std::sort(values.begin(), values.end());
    const auto at = [&](double q) { return values[std::min(values.size() - 1, static_cast<size_t>(q * static_cast<double>(values.size())))]; };
    median.points.emplace_back(static_cast<double>(step), at(0.5));
    p95.points.emplace_back(static_cast<double>(step), at(0.95));
    slowest.points.emplace_back(static_cast<double>(step), values.back());
  }
  std::vector<Series> bands = {median, p95, slowest};
  std::vector<const ModelRankAnalysis*> worst;
  for (const auto& m : a.model_ranks) worst.push_back(&m);
  const size_t shown = std::min(worst_chart_ranks, worst.size());
  std::partial_sort(worst.begin(), worst.begin() + static_cast<long>(shown), worst.end(),
                    [](const auto* x, const auto* y) { return x->step_seconds.p50 > y->step_seconds.p50; });
  for (size_t i = 0; i < shown; ++i) {
    Series s{worst[i]->name, {}};
    for (const auto& r : worst[i]->steps) s.points.emplace_back(static_cast<double>(r.step), r.seconds);
    bands.push_back(s);
  }
  return bands;
}

std::string step_time_chart(const TrainAnalysis& a) {
  std::vector<Series> steps;
  std::string step_title = "Step time per model rank (grey: warm-up)";
  if (a.model_ranks.size() > full_table_ranks) {
    steps = step_time_bands(a);
    step_title = fmt::format("Step time of {} model ranks: median, p95 and slowest per step, and the {} ranks with the "
                             "slowest median step (grey: warm-up)",
                             a.model_ranks.size(), worst_chart_ranks);
  } else {
    for (const auto& m : a.model_ranks) {
      Series s{m.name, {}};
      for (const auto& r : m.steps) s.points.emplace_back(static_cast<double>(r.step), r.seconds);
      steps.push_back(s);
    }
  }
  if (a.steady.capped) {
    // The ranks' own series cover the analysed window; the whole run is the job's mean per step.
    Series whole{"mean of the model ranks, every step", {}};
    for (const auto& j : a.job_steps) whole.points.emplace_back(static_cast<double>(j.step), j.seconds);
    steps.insert(steps.begin(), whole);
    step_title = fmt::format("Step time: every step (mean of the model ranks) and each model rank's last {} steady "
                             "steps, which the verdicts cover (grey: warm-up and steps before them)",
                             a.steady.max_steps);
    if (a.model_ranks.size() > full_table_ranks) step_title += "; above " + std::to_string(full_table_ranks) + " ranks their median, p95, slowest and slowest ranks";
  }
  return line_chart(step_title, steps, "global step", "seconds", false,
                    a.steady.first_step >= 0 ? static_cast<double>(a.steady.first_step) : NAN);
}

// The model ranks' stages per step, and the data ranks' main-thread stages (readers aside).
std::string stage_charts(const TrainAnalysis& a) {
  std::vector<Bar> bars;
  for (const auto& m : a.model_ranks) {
    Bar b{m.name, {}};
    for (const auto& [stage, breakdown] : m.stages) b.parts.emplace_back(stage_name(stage), 1000 * breakdown.per_step.mean);
    bars.push_back(b);
  }
  std::string title = "Stage breakdown per model rank (mean per steady step)";
  bars = bound_bars(std::move(bars), Worst::highest, title);
  std::string html = stacked_bars(title, bars, "ms");
  std::vector<Bar> data_bars;
  for (const auto& d : a.data_ranks) {
    Bar b{d.name, {}};
    for (Stage stage : data_stages) {
      if (stage == Stage::cache_read || stage == Stage::collate) continue;
      b.parts.emplace_back(stage_name(stage), 100 * d.stage_fraction.at(stage));
    }
    data_bars.push_back(b);
  }
  std::string data_title = "Data ranks' main thread (share of the steady window)";
  data_bars = bound_bars(std::move(data_bars), Worst::highest, data_title);
  if (!data_bars.empty()) html += stacked_bars(data_title, data_bars, "%");
  return html;
}

// Queue depth and credits of the first few ranks with counters (the analysis keeps theirs
// alone): a chart of thousands of lines shows nothing.
std::string counter_chart(const TrainAnalysis& a) {
  std::vector<Series> counters;
  const int64_t origin = a.counters_start_ns;
  size_t charted = 0;
  for (const auto& t : a.timelines) {
    if (t.counters.empty()) continue;
    if (++charted > counter_chart_ranks) break;
    for (size_t k = 0; k < t.counter_names.size(); ++k) {
      Series s{"rank " + std::to_string(t.rank) + " " + t.counter_names[k], {}};
      for (const auto& c : t.counters) {
        if (c.counter == k) s.points.emplace_back(static_cast<double>(c.t_ns - origin) * 1e-9, c.value);
      }
      if (!s.points.empty()) counters.push_back(s);
    }
  }
  return line_chart("Queue depth and credits over time", counters, "seconds since the first sample", "batches", true);
}

std::string step_histogram(const TrainAnalysis& a) {
  std::vector<double> steady_times;
  for (const auto& m : a.model_ranks) {
    for (const auto& r : m.steps) {
      if (r.steady) steady_times.push_back(r.seconds);
    }
  }
  return histogram("Step time histogram (steady steps, every model rank)", steady_times, "seconds");
}

void rank_tables(ReportDocument& doc, const TrainAnalysis& a) {
  doc.heading("Model ranks (steady steps, ms)");
  DocumentTable models{{"rank", "steps", "step p50", "p95", "p99", "busy p50", "input wait", "exposed all-reduce"}, {}, {}, {}};
  for (const auto& m : a.model_ranks) {
    models.rows.push_back({m.name, std::to_string(m.steady_steps), milliseconds(m.step_seconds.p50),
                           milliseconds(m.step_seconds.p95), milliseconds(m.step_seconds.p99),
                           milliseconds(m.busy_seconds.p50), percent(m.input_wait_fraction),
                           percent(m.allreduce_exposed_fraction)});
  }
  rank_table(doc, std::move(models), 5, Worst::highest, "model ranks");
  if (a.model_ranks.size() > full_table_ranks) host_section(doc, a);
  if (a.data_ranks.empty()) return;
  doc.heading("Data ranks (share of the steady window)");
  DocumentTable data{{"rank", "cache_read", "collate", "wait_for_reader", "credit_wait", "send", "batches", "queue depth",
                      "from storage"}, {}, {}, {}};
  for (const auto& d : a.data_ranks) {
    data.rows.push_back({d.name, percent(d.stage_fraction.at(Stage::cache_read)),
                         percent(d.stage_fraction.at(Stage::collate)), percent(d.stage_fraction.at(Stage::wait_for_reader)),
                         percent(d.stage_fraction.at(Stage::credit_wait)), percent(d.stage_fraction.at(Stage::send)),
                         std::to_string(d.batches_sent),
                         d.queue_depth_mean ? fmt::format("{:.2f}", *d.queue_depth_mean) : "-", from_storage_text(a, d)});
  }
  rank_table(doc, std::move(data), 1, Worst::highest, "data ranks");
}

void cpu_table(ReportDocument& doc, const TrainAnalysis& a) {
  if (std::none_of(a.cpu.begin(), a.cpu.end(), [](const RankCpu& c) { return c.measured; })) return;
  doc.heading("CPU and storage (ran: share of the window the process was not stopped or starved; storage read: bytes "
              "fetched from block devices in the window)");
  DocumentTable table{{"rank", "ran", "stalls", "cores used", "CPU quota", "throttled s", "storage read",
                       "cores while reading"}, {}, {}, {}};
  for (const auto& c : a.cpu) {
    if (!c.measured) continue;
    table.rows.push_back({c.name + (c.descheduled ? " (descheduled)" : ""), percent(c.ran_fraction),
                          std::to_string(c.stalls), fmt::format("{:.2f}", c.cpu_cores_mean),
                          c.quota_cores ? fmt::format("{:.2f}", *c.quota_cores) : "-",
                          fmt::format("{:.1f}", c.throttled_seconds),
                          c.storage_measured ? bytes_text(static_cast<double>(c.storage_read_bytes)) : "-",
                          c.storage_read_seconds > 0 ? fmt::format("{:.2f}", c.storage_cpu_cores()) : "-"});
  }
  rank_table(doc, std::move(table), 1, Worst::lowest, "ranks");
}

}  // namespace

std::string train_report_html(const TrainAnalysis& a, const std::vector<StallVerdict>& verdicts,
                              const std::string& run_dir) {
  ReportDocument doc;
  doc.heading("sluice train report: " + run_dir, 1);
  if (a.gpu_busy_fraction) doc.strong_paragraph(gpu_busy_text(a));
  doc.heading("Verdict").raw(verdict_boxes(verdicts));
  doc.paragraph(fmt::format("Steady state: steps {}–{} ({} per model rank after {} warm-up steps). Input wait {}, "
                            "exposed all-reduce {}, exposed transfer {}. Clock uncertainty ±{:.1f} us; causality "
                            "violations {} of {}.",
                            a.steady.first_step, a.steady.last_step, a.steady.steady_steps, a.steady.warmup_steps,
                            percent(a.input_wait_fraction), percent(a.allreduce_exposed_fraction),
                            percent(a.transfer_exposed_fraction), static_cast<double>(a.clock.max_uncertainty_ns) / 1000,
                            a.clock.causality.violations, a.clock.causality.pairs_checked));
  if (a.steady.capped) doc.paragraph(capped_window_text(a));
  doc.heading("Charts").raw(step_time_chart(a) + stage_charts(a) + counter_chart(a) + step_histogram(a));
  rank_tables(doc, a);
  cpu_table(doc, a);
  progress_deadlines_section(doc, a);
  restart_section(doc, a.restarts);
  return page("sluice train report", render_html(doc));
}

std::string prep_report_html(const PrepAnalysis& a, const std::string& cache_dir) {
  ReportDocument doc;
  doc.heading("sluice prep report: " + cache_dir, 1).heading("Verdict").raw(verdict_boxes(a.verdicts));
  doc.paragraph(fmt::format("{} ranks, {:.1f} s, {:.1f} rows/s; {} of {} rows rejected.", a.ranks.size(), a.job_seconds,
                            a.rows_per_second, a.rejects, a.corpus_rows));
  std::vector<Bar> throughput, stages;
  std::vector<double> rows_seconds;
  for (const auto& r : a.ranks) {
    throughput.push_back({r.name, {{"rows/s", r.rows_per_second}}});
    Bar b{r.name, {}};
    for (Stage stage : prep_stages) {
      b.parts.emplace_back(stage_name(stage), r.stage_seconds.count(stage) ? r.stage_seconds.at(stage) : 0.0);
    }
    stages.push_back(b);
    rows_seconds.insert(rows_seconds.end(), r.row_busy_seconds.begin(), r.row_busy_seconds.end());
  }
  std::string throughput_title = "Throughput per rank", stages_title = "Stage seconds per rank (summed over threads)";
  throughput = bound_bars(std::move(throughput), Worst::lowest, throughput_title);
  stages = bound_bars(std::move(stages), Worst::highest, stages_title);
  doc.raw(stacked_bars(throughput_title, throughput, "rows/s") + stacked_bars(stages_title, stages, "s") +
          histogram("Seconds per row (decode + resample + features + write)", rows_seconds, "seconds"));
  if (!a.reject_reasons.empty()) {
    DocumentTable rejects{{"reason", "rows"}, {}, {}, {}};
    for (const auto& [reason, count] : a.reject_reasons) rejects.rows.push_back({reason, std::to_string(count)});
    doc.heading("Rejects by reason").table(std::move(rejects));
  }
  return page("sluice prep report", render_html(doc));
}

}  // namespace sluice::report
