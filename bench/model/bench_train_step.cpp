// bench_train_step [size] [batch] [frames] [n_mels] [steps] [threads] [world_size]
// Defaults: tiny 8 400 80 20 2 1. Prints per-step time split and the median; world_size > 1
// runs the bucketed reduction through an in-process LoopbackReducer.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/loopback_reducer.h"
#include "model/trainer.h"
#include "model_test_util.h"

int main(int argc, char** argv) {
  using namespace sluice::model;
  const std::string size = argc > 1 ? argv[1] : "tiny";
  const int batch = argc > 2 ? std::atoi(argv[2]) : 8;
  const int frames = argc > 3 ? std::atoi(argv[3]) : 400;
  const int n_mels = argc > 4 ? std::atoi(argv[4]) : 80;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 20;
  const int threads = argc > 6 ? std::atoi(argv[6]) : 2;
  const int world = argc > 7 ? std::atoi(argv[7]) : 1;
  const int tokens = std::max(8, frames / 5);
  set_compute_threads(threads);

  ModelConfig model;
  model.size = size;
  model.n_mels = n_mels;
  model.vocab_size = 100;
  OptimizerConfig optimizer;
  optimizer.warmup_steps = 100;
  std::unique_ptr<LoopbackReducer> reducer;
  if (world > 1) reducer = std::make_unique<LoopbackReducer>(world);
  Trainer trainer(model, optimizer, 1, reducer.get());
  std::printf("%s\nbatch %d x %d frames x %d mels, %d tokens, %d threads\n", trainer.describe().c_str(), batch,
              frames, n_mels, tokens, threads);

  const auto data = testing::make_batch(batch, tokens, frames, n_mels, model.vocab_size, 1);
  std::vector<double> totals;
  for (int step = 0; step < steps; ++step) {
    const StepResult r = trainer.train_step(data.view());
    const double total = r.forward_s + r.backward_s + r.allreduce_exposed_s + r.optimizer_s;
    totals.push_back(total);
    std::printf("step %3d loss %.4f (mel %.4f postnet %.4f stop %.4f) | %.3f s = fwd %.3f + bwd %.3f + reduce %.3f + opt %.3f\n",
                step, r.loss, r.mel_loss, r.postnet_loss, r.stop_loss, total, r.forward_s, r.backward_s,
                r.allreduce_exposed_s, r.optimizer_s);
  }
  std::vector<double> sorted(totals.begin() + (steps > 2 ? 2 : 0), totals.end());  // skip warm-up steps
  std::sort(sorted.begin(), sorted.end());
  std::printf("median step %.3f s, min %.3f s, max %.3f s (steps 2..%d)\n", sorted[sorted.size() / 2], sorted.front(),
              sorted.back(), steps - 1);
  return 0;
}
