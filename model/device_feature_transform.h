#pragma once
// A FeatureTransform (feature_transform.h) on any device this libtorch can use: the host's loops on
// "cpu", libtorch's kernels on "cuda:N" (a GPU data rank's feature work, runtime/train/data_side.h).
// sluice_model, which links libtorch; no torch in this header.
#include <memory>
#include <string>

#include "model/feature_transform.h"

namespace sluice::model {

// Throws ConfigError for a device that is not one ("cpu", "cuda:N"), or a CUDA device this
// libtorch cannot use (a CPU-only libtorch, no GPU).
std::unique_ptr<FeatureTransform> make_feature_transform(FeatureTransformSettings settings, const std::string& device);

}  // namespace sluice::model
