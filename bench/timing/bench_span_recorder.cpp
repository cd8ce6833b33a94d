// The cost of recording a span: ScopedSpan with the recorder on, divided by the same loop with
// the recorder off (the baseline measured in the same run), on one thread and on several threads
// at once (each thread has its own lane: they should not slow each other down).
//
//   bench_span_recorder [SPANS_PER_THREAD] [THREADS]
//
// The per-span cost times the spans a step records (about 8 on a model rank, 5 per batch on a
// data rank) over the step time is the recording overhead; bench/train/bench_timing.sh measures
// it end to end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "timing/span_recorder.h"

namespace {

using sluice::timing::ScopedSpan;
using sluice::timing::SpanRecorder;
using sluice::timing::Stage;

// Seconds for `threads` threads to record `spans` spans each.
double record(int threads, int64_t spans) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([spans] {
      for (int64_t i = 0; i < spans; ++i) {
        ScopedSpan span(Stage::forward, i, 1, 4096, i);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t spans = argc > 1 ? std::atoll(argv[1]) : 2000000;
  const int max_threads = argc > 2 ? std::atoi(argv[2]) : 2;
  auto& recorder = SpanRecorder::global();
  recorder.set_capacity(1 << 16);
  std::printf("%-8s %14s %14s %14s %10s\n", "threads", "off ns/span", "on ns/span", "recording ns", "on/off");
  for (int threads = 1; threads <= max_threads; threads *= 2) {
    double best_off = 1e30, best_on = 1e30;
    for (int repeat = 0; repeat < 3; ++repeat) {  // best of 3: the machine's noise is one-sided
      recorder.set_enabled(false);
      best_off = std::min(best_off, record(threads, spans));
      recorder.set_enabled(true);
      best_on = std::min(best_on, record(threads, spans));
      recorder.clear();
    }
    const double off_ns = best_off * 1e9 / double(spans);
    const double on_ns = best_on * 1e9 / double(spans);
    std::printf("%-8d %14.1f %14.1f %14.1f %10.2f\n", threads, off_ns, on_ns, on_ns - off_ns, on_ns / off_ns);
  }
  return 0;
}
