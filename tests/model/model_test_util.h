#pragma once
// Synthetic batches for the model tests: made here, deterministic, no files.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/batch_view.h"
#include "model/model_config.h"

namespace sluice::model::testing {

struct HostBatch {
  int32_t batch_size = 0, max_tokens = 0, max_frames = 0, n_mels = 0;
  std::vector<int32_t> tokens, token_lens, mel_lens;
  std::vector<float> mels;

  BatchView view() const {
    BatchView v;
    v.tokens = tokens.data();
    v.token_lens = token_lens.data();
    v.mels = mels.data();
    v.mel_lens = mel_lens.data();
    v.batch_size = batch_size;
    v.max_tokens = max_tokens;
    v.max_frames = max_frames;
    v.n_mels = n_mels;
    return v;
  }
  float& mel(int b, int f, int m) { return mels[(static_cast<size_t>(b) * max_frames + f) * n_mels + m]; }
  int32_t& token(int b, int t) { return tokens[static_cast<size_t>(b) * max_tokens + t]; }
};

// Mels are smooth functions of the sample's tokens and the frame index (learnable); padding is
// zero. Lengths vary across the batch unless equal_lengths.
inline HostBatch make_batch(int batch, int max_tokens, int max_frames, int n_mels, int vocab, uint32_t salt,
                            bool equal_lengths = false) {
  HostBatch h;
  h.batch_size = batch;
  h.max_tokens = max_tokens;
  h.max_frames = max_frames;
  h.n_mels = n_mels;
  h.tokens.assign(static_cast<size_t>(batch) * max_tokens, 0);
  h.mels.assign(static_cast<size_t>(batch) * max_frames * n_mels, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const int tl = equal_lengths ? max_tokens : max_tokens - (b * 3 + static_cast<int>(salt)) % (max_tokens / 2 + 1);
    const int ml = equal_lengths ? max_frames : max_frames - (b * 7 + static_cast<int>(salt)) % (max_frames / 3 + 1);
    h.token_lens.push_back(tl);
    h.mel_lens.push_back(ml);
    for (int t = 0; t < tl; ++t) h.token(b, t) = 1 + static_cast<int>((b * 31 + t * 7 + salt * 13) % (vocab - 1));
    const float pitch = 0.05f + 0.02f * static_cast<float>(h.token(b, 0) % 5);
    for (int f = 0; f < ml; ++f) {
      for (int m = 0; m < n_mels; ++m) {
        h.mel(b, f, m) = 0.8f * std::sin(pitch * static_cast<float>(f) + 0.3f * static_cast<float>(m)) -
                         0.5f + 0.02f * static_cast<float>(h.token(b, (f * tl) / ml) % 7);
      }
    }
  }
  return h;
}

// Rows [first, first + count) of `full` as their own batch (same padded shape).
inline HostBatch slice_batch(const HostBatch& full, int first, int count) {
  HostBatch h = full;
  h.batch_size = count;
  const size_t token_row = static_cast<size_t>(full.max_tokens);
  const size_t mel_row = static_cast<size_t>(full.max_frames) * full.n_mels;
  h.tokens.assign(full.tokens.begin() + first * token_row, full.tokens.begin() + (first + count) * token_row);
  h.mels.assign(full.mels.begin() + first * mel_row, full.mels.begin() + (first + count) * mel_row);
  h.token_lens.assign(full.token_lens.begin() + first, full.token_lens.begin() + first + count);
  h.mel_lens.assign(full.mel_lens.begin() + first, full.mel_lens.begin() + first + count);
  return h;
}

inline ModelConfig tiny_model(int n_mels, int vocab = 40) {
  ModelConfig config;
  config.size = "tiny";
  config.vocab_size = vocab;
  config.n_mels = n_mels;
  return config;
}

inline OptimizerConfig constant_lr(double lr = 1e-3) {
  OptimizerConfig config;
  config.lr = lr;
  config.warmup_steps = 0;
  config.decay = "constant";
  return config;
}

inline float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace sluice::model::testing
