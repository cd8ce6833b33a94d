// Writes the report of a fixed set of synthetic runs (healthy, input-bound, communication-bound,
// straggler, cyclic stall, hang, descheduled, storage-bound, GPU, padding, long, thin, broken clock,
// the roles Python and data+model ranks carry,
// and prep runs: balanced, straggler, stopped, hang) into OUT/<case>/, timelines and the four files.
// scripts/report-golden.sh runs it before and after a change to the report and diffs the outputs:
// report.json must stay byte-identical (scripts read it). Not a test: it asserts nothing.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "common/file_util.h"
#include "report/write_report.h"
#include "tests/report/synthetic_run.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace sluice;
using namespace sluice::report;
using namespace sluice::report::testing;

namespace {

fs::path fresh(const fs::path& out, const std::string& name) {
  const fs::path dir = out / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes the timelines (each passed through `edit` first; false leaves the rank's file out) and the report.
void train_case(const fs::path& out, const std::string& name, const SyntheticTrain& run,
                const std::function<bool(RankTimeline&)>& edit = [](RankTimeline&) { return true; },
                const json& padding = nullptr) {
  const fs::path dir = fresh(out, name);
  for (auto& t : make_train_timelines(run)) {
    if (edit(t)) timing::write_timeline(dir, t);
  }
  if (!padding.is_null()) write_file_atomically(dir / "padding.json", padding.dump());
  write_report(dir);
}

void prep_case(const fs::path& out, const std::string& name, int ranks, const std::function<double(int)>& slow,
               const std::function<bool(RankTimeline&)>& edit, const json& prep_report) {
  const fs::path dir = fresh(out, name);
  for (auto& t : make_prep_timelines(ranks, 40, slow)) {
    if (edit(t)) timing::write_timeline(dir, t);
  }
  if (!prep_report.is_null()) write_file_atomically(dir / "prep-report.json", prep_report.dump());
  write_report(dir);
}

json padding_doc() {
  return {{"format", "sluice-padding/1"},
          {"n_buckets", 2},
          {"bucket_edges", json::array()},
          {"frame_budget", 0},
          {"buckets",
           {{{"bucket", 0}, {"shortest_frames", 100}, {"max_frames", 200}, {"batches", 10}, {"frame_efficiency", 0.9}},
            {{"bucket", 1}, {"shortest_frames", 201}, {"max_frames", 800}, {"batches", 10}, {"frame_efficiency", 0.5}}}},
          {"total", {{"batches", 20}, {"frame_efficiency", 0.7}, {"token_efficiency", 0.7}}},
          {"alternatives",
           {{{"n_buckets", 4}, {"frame_efficiency", 0.8}, {"padded_frames_saved_fraction", 0.125}},
            {{"n_buckets", 8}, {"frame_efficiency", 0.9}, {"padded_frames_saved_fraction", 0.222}}}}};
}

void train_cases(const fs::path& out) {
  const auto keep = [](RankTimeline&) { return true; };
  train_case(out, "train-healthy", SyntheticTrain{});
  SyntheticTrain input;
  input.batch_wait = 0.08;
  train_case(out, "train-input-bound", input);
  SyntheticTrain credits = input;
  credits.data_wait_stage = Stage::credit_wait;
  credits.reader_busy_share = 0.1;
  credits.queue_depth = 2;
  train_case(out, "train-input-credits", credits);
  train_case(out, "train-descheduled", credits, [](RankTimeline& t) {
    t.set_resources(resources_stopped(t, t.rank == 0 ? 150 : 0, 200));
    return true;
  });
  train_case(out, "train-storage", input, [](RankTimeline& t) {
    t.set_resources(resources_stopped(t, 0, 200));
    if (t.rank == 0) set_storage_reads(t, storage_reads(t, 8e6, 0.05));
    return true;
  });
  SyntheticTrain comm;
  comm.allreduce = 0.03;
  train_case(out, "train-comm-bound", comm, [](RankTimeline& t) {
    t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
    return true;
  });
  SyntheticTrain straggler;
  straggler.model_ranks = 4;
  straggler.extra_forward = [](int rank, int64_t) { return rank == 2 ? 0.03 : 0.0; };
  train_case(out, "train-straggler", straggler);
  SyntheticTrain quota;
  quota.steps = 60;
  quota.extra_forward = [](int rank, int64_t step) {
    return rank != 2 ? 0.0 : 0.16 + 0.3 * static_cast<double>((step * 7919) % 101) / 100.0;
  };
  train_case(out, "train-cpu-quota", quota, [](RankTimeline& t) {
    t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
    t.set_resources(resources_stopped(t, t.rank == 2 ? 80 : 0, 100));
    if (t.rank == 2) {
      t.resources["cgroup"] = {{"path", "/sys/fs/cgroup/x"}, {"quota_cores", 0.2}, {"throttled_seconds", 30.0},
                               {"throttled_periods", 300}};
    }
    return true;
  });
  SyntheticTrain cyclic;
  cyclic.steps = 120;
  cyclic.extra_wait = [](int64_t step) { return step % 10 == 0 ? 0.3 : 0.0; };
  train_case(out, "train-cyclic", cyclic);
  SyntheticTrain hang;
  hang.model_ranks = 3;
  train_case(out, "train-hang", hang, [](RankTimeline& t) {
    if (t.rank == 2) return false;
    if (t.rank != 0) {
      t.status = "failed";
      t.waiting_for = 2;
    }
    return true;
  });
  train_case(out, "train-silent-rank", hang, [](RankTimeline& t) {
    if (t.rank == 3) {
      t.status = "stopped";
      t.spans.resize(t.spans.size() / 2);
    } else {
      t.status = "failed";
      t.waiting_for = 3;
      t.error = "timed out waiting for rank 3";
    }
    return true;
  });
  SyntheticTrain gpu;
  gpu.gpu_busy = {0.9, 0.7};
  train_case(out, "train-gpu", gpu);
  train_case(out, "train-padding", SyntheticTrain{}, keep, padding_doc());
  SyntheticTrain long_run;
  long_run.steps = 700;
  long_run.extra_wait = [](int64_t step) { return step % 25 == 0 ? 0.2 : 0.0; };
  train_case(out, "train-long", long_run);
  SyntheticTrain thin;
  thin.steps = 15;
  train_case(out, "train-thin", thin);
  SyntheticTrain skewed;
  skewed.skew_ns = {0, 5'000'000'000, -3'000'000'000};
  skewed.record_offsets = false;
  train_case(out, "train-broken-clock", skewed);
  // The role as the role plan writes it: Python model ranks, and one process doing both.
  train_case(out, "train-python-ranks", input, [](RankTimeline& t) {
    if (t.rank != 0) t.role = "model (python)";
    return true;
  });
  train_case(out, "train-data-and-model", SyntheticTrain{}, [](RankTimeline& t) {
    if (t.rank == 0) t.role = "data+model";
    if (t.rank == 2) t.role = "data_and_model";
    return true;
  });
}

void prep_cases(const fs::path& out) {
  const auto keep = [](RankTimeline&) { return true; };
  const auto even = [](int) { return 1.0; };
  prep_case(out, "prep-balanced", 3, even, keep, nullptr);
  prep_case(out, "prep-straggler", 3, [](int rank) { return rank == 1 ? 2.5 : 1.0; }, keep,
            json{{"corpus_rows", 122},
                 {"rejects", 2},
                 {"reject_reasons", {{"too_short", 2}}},
                 {"ranks", {{{"rank", 0}, {"audio_seconds", 100.0}, {"rejects", 1}}}}});
  prep_case(out, "prep-too-many-rejects", 2, even,
            [](RankTimeline& t) {
              t.status = "stopped";
              t.settings["prep.max_reject_fraction"] = 0.05;
              t.summary = {{"stop_reason", "too_many_rejects"}, {"rejects_file", "/cache/rejects.jsonl"}};
              return true;
            },
            json{{"corpus_rows", 80},
                 {"rejects", 30},
                 {"reject_reasons", {{"decode_error", 28}, {"too_short", 2}}},
                 {"ranks", json::array()}});
  prep_case(out, "prep-disk-full", 2, even,
            [](RankTimeline& t) {
              t.status = "failed";
              if (t.rank == 0) {
                t.summary = {{"stop_reason", "environment_error"},
                             {"error", "no space left on device: HDF5 H5Dwrite on /cache/shard-00003.h5.tmp"},
                             {"error_rank", 1},
                             {"error_host", "prep1"}};
              }
              return true;
            },
            nullptr);
  prep_case(out, "prep-hang", 3, even,
            [](RankTimeline& t) {
              if (t.rank == 2) return false;
              t.status = "failed";
              t.waiting_for = 2;
              return true;
            },
            nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  train_cases(out);
  prep_cases(out);
  return 0;
}
