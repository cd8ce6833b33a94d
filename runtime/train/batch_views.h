#pragma once
// What the model library sees of a collated batch (runtime/train/batch_buffer.h): the trainer's
// model::BatchView and the feature transform's model::MelBatchRef.
#include "model/batch_view.h"
#include "model/feature_transform.h"
#include "runtime/train/batch_buffer.h"

namespace sluice::runtime {

// A batch in host memory.
model::BatchView view_of(const BatchPointers& batch);
// A batch that arrived in device memory: sizes from its host copy of the header, data on the GPU.
model::BatchView view_of(const DeviceBatch& batch);

// The mels of a collated host batch, for the feature transform; `mels` may point elsewhere (the
// same batch uploaded to a GPU).
model::MelBatchRef mel_batch_of(const BatchPointers& batch, float* mels);

}  // namespace sluice::runtime
