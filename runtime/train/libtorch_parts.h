#pragma once
// The train job's libtorch parts (torch_parts.h), as sluice_torch_train makes them from
// sluice_model: the C++ model loop, libtorch's device count and thread pool, the feature
// transform on CUDA and the GPU memory cap. Linked only by what runs C++ model ranks
// (sluice-train, the tests of the model loop); never by the Python module.
#include "runtime/train/torch_parts.h"

namespace sluice::runtime {

// One set per process, made on first use; never throws.
const TorchParts& libtorch_parts();

}  // namespace sluice::runtime
