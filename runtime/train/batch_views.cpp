#include "runtime/train/batch_views.h"

namespace sluice::runtime {
namespace {

// The sections at `data` with the sizes of `header` (host memory: a device batch's header is
// read from its host copy).
model::BatchView view_of(const BatchPointers& data, const BatchHeader& header, bool on_device) {
  model::BatchView view;
  view.tokens = data.tokens;
  view.token_lens = data.token_lens;
  view.mels = data.mels;
  view.mel_lens = data.mel_lens;
  view.batch_size = header.batch_size;
  view.max_tokens = header.max_tokens;
  view.max_frames = header.max_frames;
  view.n_mels = header.n_mels;
  view.on_device = on_device;
  return view;
}

}  // namespace

model::BatchView view_of(const BatchPointers& batch) { return view_of(batch, *batch.header, false); }

model::BatchView view_of(const DeviceBatch& batch) { return view_of(batch.device, *batch.host.header, true); }

model::MelBatchRef mel_batch_of(const BatchPointers& batch, float* mels) {
  model::MelBatchRef ref;
  ref.mels = mels;
  ref.mel_lens = batch.mel_lens;
  ref.sample_indices = batch.indices;
  ref.batch_size = batch.header->batch_size;
  ref.max_frames = batch.header->max_frames;
  ref.n_mels = batch.header->n_mels;
  return ref;
}

}  // namespace sluice::runtime
