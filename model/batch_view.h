#pragma once
// One training batch as the input pipeline hands it to the model: raw pointers into buffers the
// caller owns, with static padded shapes. No torch here: the runtime fills this from its pinned
// feed buffers without knowing about the model's tensor library.
#include <cstdint>

namespace sluice::model {

// Layout (row-major, C order):
//   tokens      int32 [batch_size, max_tokens]           token ids; entries past token_lens[b]
//                                                       are padding and are never read as ids
//   token_lens  int32 [batch_size]                       1 <= token_lens[b] <= max_tokens
//   mels        float [batch_size, max_frames, n_mels]   log-mel frames; frames past mel_lens[b]
//                                                       are padding and never change the loss
//   mel_lens    int32 [batch_size]                       1 <= mel_lens[b] <= max_frames
//
// Ownership: the caller owns the buffers and must keep them unchanged until the call that takes
// the view returns (Trainer::train_step / validation_loss do not keep pointers past the call).
// on_device: false = host memory (on a CPU trainer it is wrapped without a copy; on a CUDA
// trainer it is copied to the device, synchronously); true = memory on the trainer's own CUDA
// device (a CPU trainer rejects it).
struct BatchView {
  const int32_t* tokens = nullptr;
  const int32_t* token_lens = nullptr;
  const float* mels = nullptr;
  const int32_t* mel_lens = nullptr;
  int32_t batch_size = 0;
  int32_t max_tokens = 0;
  int32_t max_frames = 0;
  int32_t n_mels = 0;
  bool on_device = false;
};

}  // namespace sluice::model
