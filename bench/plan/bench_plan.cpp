// Start-up at cluster scale: what every rank of `sluice train` computes before its first step,
// for a corpus and a rank count of a cluster (default: 1,000,000 samples, 4,096 model ranks).
//
//   bench_plan [SAMPLES] [MODEL_RANKS] [BATCH_SIZE] [REPEATS] [INDEX_FILE] [MIXTURE_UNIT]
//
// INDEX_FILE "-" skips the index. MIXTURE_UNIT (corpus, language or speaker) times the same as a
// mixture: the samples in two caches (70% and 30%, weights 1 and 0.37), train.mixture_temperature
// 0.5 over that unit, every 7th sample of a second language, 400 samples a speaker; and counts
// 200 epochs of the schedule (PlanSchedule::epoch_start, what a run's numbering needs).
//
// Prints the minimum and median seconds (over REPEATS), wall and this process's CPU, of:
//   - the batch plan of one epoch (BatchPlan::build), as every rank builds it at start-up;
//   - the schedule (PlanSchedule: epoch 0's plan and the numbering);
//   - the rest of an epoch after an elastic resume to 3/4 of the model ranks at half the epoch
//     (BatchPlan::build_rest: two plans and the bookkeeping);
//   - the plan's fingerprint alone (what --resume compares);
// the plan's memory (the batches' sample indices); three epochs of the schedule accounted sample by
// sample (trained, not trained, padded frames against real ones: account_epochs); and, with
// INDEX_FILE (bench/plan/make_index.py writes one), the seconds to read the cache index
// (cache::read_index: every rank reads it in CacheReader::open) and the file's size. A benchmark,
// not a test: nothing here fails on time.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "runtime/train/batch_plan.h"
#include "runtime/train/plan_schedule.h"

namespace {

using namespace sluice;
using runtime::BatchPlan;
using runtime::PlanSample;

// LibriTTS-like lengths, 100 to 2,100 frames, from a fixed LCG.
std::vector<PlanSample> make_split(int64_t n) {
  std::vector<PlanSample> samples;
  samples.reserve(static_cast<size_t>(n));
  uint64_t state = 7;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto frames = static_cast<int32_t>(100 + (state >> 33) % 2000);
    samples.push_back({i, frames, frames / 6 + 3});
  }
  return samples;
}

// This process's CPU seconds: on a shared machine the wall clock counts the other processes too.
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

struct Timing {
  double min_s = 0, median_s = 0, min_cpu_s = 0, median_cpu_s = 0;
};

Timing time_it(int repeats, const std::function<void()>& work) {
  std::vector<double> seconds, cpu;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    work();
    cpu.push_back(cpu_seconds() - cpu_start);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  std::sort(cpu.begin(), cpu.end());
  return {seconds.front(), seconds[seconds.size() / 2], cpu.front(), cpu[cpu.size() / 2]};
}

void print(const char* what, const Timing& t) {
  std::printf("%-58s %9.3f s %9.3f s %9.3f s %9.3f s\n", what, t.min_s, t.median_s, t.min_cpu_s, t.median_cpu_s);
}

// What `epochs` whole epochs of PlanSchedule train, sample by sample: per epoch the samples
// trained and not, the padded mel frames against the real ones, and over the run how many
// samples were trained fewer times than the epochs (not trained at the run's end) or more (a
// repeat, which the plan must never make). Uses only PlanSchedule::epoch_start/batch and the
// plan's shapes, so the same source measures any version of the plan.
void account_epochs(const std::vector<PlanSample>& split, const runtime::BatchPlanConfig& config, int model_ranks,
                    int epochs) {
  const runtime::PlanSchedule schedule(split, config, model_ranks);
  std::vector<int32_t> frames_of(split.size());
  for (const PlanSample& s : split) frames_of[static_cast<size_t>(s.index)] = s.n_frames;
  std::vector<int16_t> times(split.size(), 0);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    int64_t trained = 0, steps = 0;
    double padded = 0, real = 0;
    for (int64_t g = schedule.epoch_start(epoch); g < schedule.epoch_start(epoch + 1); ++g, ++steps) {
      for (int rank = 0; rank < model_ranks; ++rank) {
        const runtime::ScheduledBatch scheduled = schedule.batch(g, rank);
        padded += static_cast<double>(scheduled.batch->samples.size()) * scheduled.shape().max_frames;
        for (int64_t index : scheduled.batch->samples) {
          real += frames_of[static_cast<size_t>(index)];
          ++times[static_cast<size_t>(index)];
          ++trained;
        }
      }
    }
    const auto total = static_cast<int64_t>(split.size());
    int64_t behind = 0;  // sample-epochs owed so far and not trained: lost, or deferred (carried)
    for (int16_t t : times) behind += t < epoch + 1 ? epoch + 1 - t : 0;
    std::printf("epoch %d: %lld steps, %lld samples trained, %lld sample-epochs behind after it (%.2f%% of the "
                "split), padded/real mel frames %.4f\n",
                epoch, static_cast<long long>(steps), static_cast<long long>(trained), static_cast<long long>(behind),
                100.0 * static_cast<double>(behind) / static_cast<double>(total), padded / real);
  }
  int64_t short_of = 0, repeated = 0;
  for (int16_t t : times) {
    short_of += t < epochs ? epochs - t : 0;
    repeated += t > epochs ? t - epochs : 0;
  }
  std::printf("over %d epochs: %lld sample-epochs not trained by the run's end (lost, or deferred past the end), "
              "%lld trained more than once per epoch\n",
              epochs, static_cast<long long>(short_of), static_cast<long long>(repeated));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t samples = argc > 1 ? std::atoll(argv[1]) : 1'000'000;
  const int model_ranks = argc > 2 ? std::atoi(argv[2]) : 4096;
  const int batch_size = argc > 3 ? std::atoi(argv[3]) : 4;
  const int repeats = std::max(1, argc > 4 ? std::atoi(argv[4]) : 5);
  const char* index_file = argc > 5 && std::string(argv[5]) != "-" ? argv[5] : nullptr;

  std::vector<PlanSample> split = make_split(samples);
  runtime::BatchPlanConfig config;
  config.batch_size = batch_size;
  if (argc > 6) {
    config.mixture = {{0, 1.0}, {samples * 7 / 10, 0.37}};
    config.mixture_temperature = 0.5;
    config.mixture_unit = runtime::parse_mixture_unit(argv[6]);
    for (PlanSample& sample : split) {
      sample.language = sample.index % 7 == 0 ? 1 : 0;
      sample.speaker = static_cast<uint32_t>(sample.index / 400);
    }
    std::printf("a mixture of two caches (weights 1 and 0.37), temperature 0.5 over each %s\n",
                runtime::mixture_unit_name(config.mixture_unit));
  }
  std::printf("%lld samples, %d model ranks, batch size %d, %d buckets, %d repeats\n",
              static_cast<long long>(samples), model_ranks, batch_size, config.n_buckets, repeats);
  std::printf("%-58s %11s %11s %11s %11s\n", "", "wall min", "wall median", "CPU min", "CPU median");

  const BatchPlan plan = BatchPlan::build(split, config, model_ranks, 0);
  print("batch plan of one epoch (BatchPlan::build)",
        time_it(repeats, [&] { BatchPlan::build(split, config, model_ranks, 1); }));
  print("schedule (PlanSchedule: epoch 0 and the numbering)",
        time_it(repeats, [&] { runtime::PlanSchedule schedule(split, config, model_ranks); }));
  const int smaller = std::max(1, model_ranks * 3 / 4);
  const std::vector<runtime::EpochSegment> earlier{{model_ranks, plan.steps() / 2}};
  print("elastic rest of the epoch (build_rest, 3/4 of the ranks)",
        time_it(repeats, [&] { BatchPlan::build_rest(split, config, smaller, 0, earlier); }));
  print("plan fingerprint (BatchPlan::fingerprint_of)",
        time_it(repeats, [&] { BatchPlan::fingerprint_of(split, config, model_ranks); }));
  const double plan_mib = static_cast<double>(plan.steps() * model_ranks * batch_size * 8) / (1 << 20);
  std::printf("plan: %lld steps in epoch 0, %.1f MiB of sample indices\n", static_cast<long long>(plan.steps()),
              plan_mib);
  if (!config.mixture.empty()) {
    print("schedule counted to epoch 200 (PlanSchedule::epoch_start)", time_it(repeats, [&] {
            runtime::PlanSchedule schedule(split, config, model_ranks);
            (void)schedule.epoch_start(200);
          }));
  }
  account_epochs(split, config, model_ranks, 3);
  if (index_file != nullptr) {
    int64_t rows = 0;
    print("cache index read (cache::read_index)", time_it(repeats, [&] {
            rows = cache::read_index(index_file).size();
          }));
    std::printf("index: %lld rows, %.1f MiB on disk\n", static_cast<long long>(rows),
                static_cast<double>(std::filesystem::file_size(index_file)) / (1 << 20));
  }
  return 0;
}
