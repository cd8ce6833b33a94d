// make_synthetic_run: a cluster-sized train run directory for `sluice report`, made from a small
// one (tests/report/synthetic_cluster.h): the template's ranks cloned and perturbed into --ranks
// ranks with a planted straggler model rank and a planted slow data rank.
//
//   make_synthetic_run --ranks 1024 --out DIR [--from RUN_DIR] [--steps 300] [--stretch K]
//                      [--straggler RANK] [--slow-data RANK] [--seed N]
//
// --from: a real run's directory (its timeline/rank-*.json, one data rank feeding the others: a
// 3-rank quick start); without it the template is tests/report/synthetic_run.h's make_train_timelines
// (2 model ranks, --steps steps). --stretch K: the template K times over, one copy after the other
// (synthetic_cluster.h, stretch_template: a 300-step real run becomes 3,000 steps). Prints the
// planted ranks as `straggler=R slow_data=R`.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "synthetic_cluster.h"
#include "synthetic_run.h"

namespace {

using namespace sluice::report::testing;

int usage(const char* message) {
  std::fprintf(stderr,
               "make_synthetic_run: %s\nusage: make_synthetic_run --ranks N --out DIR [--from RUN_DIR] [--steps S] "
               "[--stretch K] [--straggler RANK] [--slow-data RANK] [--seed N]\n",
               message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ClusterPlan plan;
  std::string out, from;
  int steps = 300, stretch = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage(("missing the value of " + arg).c_str());
    const char* value = argv[++i];
    if (arg == "--ranks") plan.ranks = std::atoi(value);
    else if (arg == "--out") out = value;
    else if (arg == "--from") from = value;
    else if (arg == "--steps") steps = std::atoi(value);
    else if (arg == "--stretch") stretch = std::atoi(value);
    else if (arg == "--straggler") plan.straggler_rank = std::atoi(value);
    else if (arg == "--slow-data") plan.slow_data_rank = std::atoi(value);
    else if (arg == "--seed") plan.seed = std::strtoull(value, nullptr, 10);
    else return usage(("unknown option " + arg).c_str());
  }
  if (out.empty() || plan.ranks < 3) return usage("--out and --ranks (at least 3) are required");
  try {
    SyntheticTrain small;
    small.steps = steps;
    const auto tmpl =
        stretch_template(from.empty() ? make_train_timelines(small) : sluice::timing::read_timelines(from), stretch);
    if (tmpl.empty()) return usage(("no timelines under " + from + "/timeline").c_str());
    plant_default_ranks(plan, cluster_shape(tmpl));
    write_synthetic_cluster(tmpl, plan, out);
    std::printf("straggler=%d slow_data=%d\n", plan.straggler_rank, plan.slow_data_rank);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_synthetic_run: %s\n", error.what());
    return 1;
  }
  return 0;
}
