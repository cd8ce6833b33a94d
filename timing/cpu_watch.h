#pragma once
// Whether this process got the CPU when it wanted it. A rank that the OS stops (SIGSTOP, a
// debugger, job control) or starves (a cgroup CPU quota, other processes on its cores) makes every
// stage it is in look slow: its sends look like a slow transport, its forward like a slow GPU.
// Spans cannot tell; the OS can.
//
// CpuWatch runs one thread that sleeps `interval` at a time and records when it woke up too late:
// the lateness is time in which no thread of this process could run (the whole process is stopped
// by SIGSTOP, and a cgroup quota throttles every thread of the group). Lateness beyond
// `stall_threshold` is kept as a stall interval [expected wake-up, actual wake-up] in now_ns()
// time, so the report can clip it to any window. Costs one wake-up per interval (100/s).
//
// to_json() adds what the OS counts for free: getrusage (CPU seconds, page faults, context
// switches) for the process, the same per named thread from /proc/self/task/TID (the lanes of a
// SpanRecorder snapshot), and the CPU quota and throttled time of the process's cgroup (v2
// cpu.max / cpu.stat, or v1 cpu.cfs_quota_us / cpu.stat), when readable.
//
// JSON ("resources" in the timeline file, timing/timeline_file.h):
//   wall_seconds, cpu_user_seconds, cpu_system_seconds, cpu_cores_mean (CPU seconds / wall),
//   minor_faults, major_faults, voluntary_switches, involuntary_switches,
//   interval_ms, stall_threshold_ms, stalled_seconds, stall_count, longest_stall_seconds,
//   ran_fraction (1 - stalled / wall), stalls [[start_ns, end_ns], ...] (local clock, the last
//   max_stalls kept), stalls_dropped,
//   threads [{lane, tid, cpu_seconds, voluntary_switches, involuntary_switches}] (live threads),
//   cgroup {path, quota_cores (null: none), throttled_seconds, throttled_periods} or null,
//   storage_reads {read_bytes, sample_ms, intervals [[start_ns, end_ns, read_bytes, cpu_ns], ...],
//   intervals_dropped} or null (no /proc/self/io).
//
// storage_reads: every `sample_ms` the watch reads /proc/self/io's read_bytes (bytes this process
// made the kernel fetch from a block device: page-cache misses, not rchar) and the process's CPU
// time; an interval in which read_bytes grew is kept with the bytes and the CPU nanoseconds the
// process used in it; at max_read_intervals, contiguous neighbours are merged (the oldest dropped
// only when that frees too little). Intervals without reads are not kept, so
// a process reading from the page cache (or not at all) records nothing. The report (report/
// cpu_analysis.h) clips them to the steady window: how fast the cache's storage delivered, and
// whether the process was on CPU or waiting for the device while it read.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/span_recorder.h"

namespace sluice::timing {

class CpuWatch {
 public:
  static constexpr size_t max_stalls = 20000;
  static constexpr size_t max_read_intervals = 20000;
  static constexpr int read_sample_ticks = 25;  // storage reads sampled every 25 intervals (250 ms)

  explicit CpuWatch(std::chrono::milliseconds interval = std::chrono::milliseconds(10),
                    std::chrono::milliseconds stall_threshold = std::chrono::milliseconds(5));
  ~CpuWatch();  // stops and joins the thread
  CpuWatch(const CpuWatch&) = delete;
  CpuWatch& operator=(const CpuWatch&) = delete;

  // Safe while the watch runs. `threads`: lane names and thread ids (SpanRecorder snapshot).
  nlohmann::json to_json(const std::vector<std::pair<std::string, int>>& threads = {}) const;

 private:
  void run();
  void sample_storage_reads();  // on the watch's thread, every read_sample_ticks
  void coarsen_read_intervals();  // when max_read_intervals are kept; mutex_ held

  std::chrono::milliseconds interval_;
  std::chrono::milliseconds threshold_;
  int64_t started_ns_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;  // guards the stall record
  std::vector<std::pair<int64_t, int64_t>> stalls_;
  uint64_t stall_count_ = 0;
  int64_t stalled_ns_ = 0;
  int64_t longest_ns_ = 0;
  // Storage reads (guarded by mutex_): the last sample, the intervals with reads. -1: unreadable.
  int64_t last_read_bytes_ = -1, last_read_t_ns_ = 0, last_cpu_ns_ = 0;
  std::vector<std::array<int64_t, 4>> read_intervals_;
  uint64_t read_intervals_dropped_ = 0;
  std::thread thread_;
};

// The calling thread's kernel thread id (gettid).
int this_thread_id();

// The CPU quota and throttling of this process's cgroup (v2 or v1 cpu controller); null when
// neither can be read.
nlohmann::json cgroup_cpu();

// read_bytes of /proc/self/io (bytes fetched from block devices for this process), -1 when unreadable.
int64_t storage_read_bytes();

}  // namespace sluice::timing
