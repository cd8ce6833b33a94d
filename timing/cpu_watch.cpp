#include "timing/cpu_watch.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::timing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); }

std::string read_small_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "key value" lines (cpu.stat, /proc/.../status with "key:\tvalue"): the value of `key`, or -1.
int64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::string rest = line.substr(key.size());
    if (!rest.empty() && rest[0] == ':') rest.erase(0, 1);
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '\t')) continue;  // a longer key with this prefix
    try {
      return std::stoll(rest);
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

// CPU seconds and context switches of one live thread of this process; null when it is gone.
json thread_usage(const std::string& lane, int tid) {
  const fs::path task = fs::path("/proc/self/task") / std::to_string(tid);
  const std::string stat = read_small_file(task / "stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return nullptr;
  std::istringstream fields(stat.substr(close + 2));  // from field 3 (state) on
  std::vector<std::string> f;
  for (std::string word; fields >> word;) f.push_back(word);
  if (f.size() < 13) return nullptr;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double cpu = (std::stod(f[11]) + std::stod(f[12])) / tick;  // utime, stime (fields 14, 15)
  const std::string status = read_small_file(task / "status");
  return {{"lane", lane},
          {"tid", tid},
          {"cpu_seconds", cpu},
          {"voluntary_switches", keyed_value(status, "voluntary_ctxt_switches")},
          {"involuntary_switches", keyed_value(status, "nonvoluntary_ctxt_switches")}};
}

json cgroup_v2(const std::string& path) {
  fs::path root = "/sys/fs/cgroup";
  if (!fs::exists(root / "cgroup.controllers")) root /= "unified";
  const fs::path dir = root / fs::path(path).relative_path();
  const std::string max = read_small_file(dir / "cpu.max");
  const std::string stat = read_small_file(dir / "cpu.stat");
  if (stat.empty()) return nullptr;
  json quota = nullptr;
  std::istringstream words(max);
  std::string limit, period;
  if (words >> limit >> period && limit != "max") quota = std::stod(limit) / std::stod(period);
  const int64_t throttled_us = keyed_value(stat, "throttled_usec");
  return {{"path", dir.string()},
          {"quota_cores", quota},
          {"throttled_seconds", throttled_us >= 0 ? 1e-6 * static_cast<double>(throttled_us) : 0.0},
          {"throttled_periods", std::max<int64_t>(0, keyed_value(stat, "nr_throttled"))}};
}

json cgroup_v1(const std::string& controllers, const std::string& path) {
  const fs::path dir = fs::path("/sys/fs/cgroup") / controllers / fs::path(path).relative_path();
  const std::string stat = read_small_file(dir / "cpu.stat");
  if (stat.empty()) return nullptr;
  json quota = nullptr;
  try {
    const double limit = std::stod(read_small_file(dir / "cpu.cfs_quota_us"));
    const double period = std::stod(read_small_file(dir / "cpu.cfs_period_us"));
    if (limit > 0 && period > 0) quota = limit / period;
  } catch (const std::exception&) {
  }
  const int64_t throttled_ns = keyed_value(stat, "throttled_time");
  return {{"path", dir.string()},
          {"quota_cores", quota},
          {"throttled_seconds", throttled_ns >= 0 ? 1e-9 * static_cast<double>(throttled_ns) : 0.0},
          {"throttled_periods", std::max<int64_t>(0, keyed_value(stat, "nr_throttled"))}};
}

int64_t process_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

int64_t storage_read_bytes() { return keyed_value(read_small_file("/proc/self/io"), "read_bytes"); }

int this_thread_id() { return static_cast<int>(::syscall(SYS_gettid)); }

json cgroup_cpu() {
  std::istringstream lines(read_small_file("/proc/self/cgroup"));
  std::string line;
  json first = nullptr;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path; v2 is "0::/path", v1's cpu controller "N:cpu,cpuacct:/path"
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    json found = nullptr;
    if (controllers.empty()) {
      found = cgroup_v2(path);
    } else {
      std::istringstream names(controllers);
      for (std::string name; std::getline(names, name, ',');) {
        if (name == "cpu") found = cgroup_v1(controllers, path);
      }
    }
    if (found.is_null()) continue;
    if (!found["quota_cores"].is_null()) return found;  // the group that limits it
    if (first.is_null()) first = found;
  }
  return first;
}

CpuWatch::CpuWatch(std::chrono::milliseconds interval, std::chrono::milliseconds stall_threshold)
    : interval_(interval),
      threshold_(stall_threshold),
      started_ns_(now_ns()),
      last_read_bytes_(storage_read_bytes()),
      last_read_t_ns_(started_ns_),
      last_cpu_ns_(process_cpu_ns()),
      thread_([this] { run(); }) {}

CpuWatch::~CpuWatch() {
  stop_ = true;
  thread_.join();
}

void CpuWatch::run() {
  const int64_t interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(interval_).count();
  const int64_t threshold_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(threshold_).count();
  for (int64_t tick = 1; !stop_; ++tick) {
    if (tick % read_sample_ticks == 0) sample_storage_reads();
    const int64_t before = now_ns();
    std::this_thread::sleep_for(interval_);
    const int64_t after = now_ns();
    const int64_t late = after - before - interval_ns;
    if (late <= threshold_ns) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    ++stall_count_;
    stalled_ns_ += late;
    longest_ns_ = std::max(longest_ns_, late);
    if (stalls_.size() >= max_stalls) stalls_.erase(stalls_.begin());  // rare: keep the most recent
    stalls_.emplace_back(before + interval_ns, after);
  }
}

void CpuWatch::sample_storage_reads() {
  const int64_t bytes = storage_read_bytes();
  const int64_t t = now_ns(), cpu = process_cpu_ns();
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes < 0 || last_read_bytes_ < 0) return;  // no /proc/self/io here
  if (bytes > last_read_bytes_) {
    if (read_intervals_.size() >= max_read_intervals) coarsen_read_intervals();
    read_intervals_.push_back({last_read_t_ns_, t, bytes - last_read_bytes_, cpu - last_cpu_ns_});
  }
  last_read_bytes_ = bytes;
  last_read_t_ns_ = t;
  last_cpu_ns_ = cpu;
}

void CpuWatch::coarsen_read_intervals() {
  // Contiguous neighbours become one interval (their sums): a process that reads all the time keeps
  // its whole history at half the resolution. Intervals with gaps between them stay apart, and
  // when that frees too little the oldest go (counted in intervals_dropped).
  std::vector<std::array<int64_t, 4>> merged;
  merged.reserve(read_intervals_.size());
  for (size_t i = 0; i < read_intervals_.size(); ++i) {
    auto one = read_intervals_[i];
    if (i + 1 < read_intervals_.size() && read_intervals_[i + 1][0] == one[1]) {
      const auto& next = read_intervals_[++i];
      one = {one[0], next[1], one[2] + next[2], one[3] + next[3]};
    }
    merged.push_back(one);
  }
  read_intervals_ = std::move(merged);
  if (read_intervals_.size() > max_read_intervals * 3 / 4) {
    const size_t drop = read_intervals_.size() - max_read_intervals * 3 / 4;
    read_intervals_.erase(read_intervals_.begin(), read_intervals_.begin() + static_cast<std::ptrdiff_t>(drop));
    read_intervals_dropped_ += drop;
  }
}

json CpuWatch::to_json(const std::vector<std::pair<std::string, int>>& threads) const {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const double wall = static_cast<double>(now_ns() - started_ns_) * 1e-9;
  const double user = seconds_of(usage.ru_utime), system = seconds_of(usage.ru_stime);
  json j = {{"wall_seconds", wall},
            {"cpu_user_seconds", user},
            {"cpu_system_seconds", system},
            {"cpu_cores_mean", wall > 0 ? (user + system) / wall : 0.0},
            {"minor_faults", usage.ru_minflt},
            {"major_faults", usage.ru_majflt},
            {"voluntary_switches", usage.ru_nvcsw},
            {"involuntary_switches", usage.ru_nivcsw},
            {"interval_ms", interval_.count()},
            {"stall_threshold_ms", threshold_.count()}};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const double stalled = static_cast<double>(stalled_ns_) * 1e-9;
    j["stalled_seconds"] = stalled;
    j["stall_count"] = stall_count_;
    j["longest_stall_seconds"] = static_cast<double>(longest_ns_) * 1e-9;
    j["ran_fraction"] = wall > 0 ? std::clamp(1.0 - stalled / wall, 0.0, 1.0) : 1.0;
    j["stalls"] = stalls_;
    j["stalls_dropped"] = stall_count_ - stalls_.size();
    const int64_t read_bytes = storage_read_bytes();
    j["storage_reads"] = read_bytes < 0 || last_read_bytes_ < 0
                             ? json(nullptr)
                             : json{{"read_bytes", read_bytes},
                                    {"sample_ms", read_sample_ticks * interval_.count()},
                                    {"intervals", read_intervals_},
                                    {"intervals_dropped", read_intervals_dropped_}};
  }
  json per_thread = json::array();
  for (const auto& [lane, tid] : threads) {
    if (tid <= 0) continue;
    json one = thread_usage(lane, tid);
    if (!one.is_null()) per_thread.push_back(std::move(one));
  }
  j["threads"] = per_thread;
  j["cgroup"] = cgroup_cpu();
  return j;
}

}  // namespace sluice::timing
