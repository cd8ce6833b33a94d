#include "runtime/train/libtorch_parts.h"

#include <string>

#include "model/device_facts.h"
#include "model/device_feature_transform.h"
#include "model/trainer.h"
#include "runtime/train/model_loop.h"

namespace sluice::runtime {

const TorchParts& libtorch_parts() {
  static const TorchParts parts{
      train_model,
      model::cuda_device_count,
      model::set_compute_threads,
      [](const model::FeatureTransformSettings& settings, int gpu) {
        return model::make_feature_transform(settings, "cuda:" + std::to_string(gpu));
      },
      [](int gpu, double fraction) { model::limit_gpu_memory(gpu, fraction); },
  };
  return parts;
}

}  // namespace sluice::runtime
