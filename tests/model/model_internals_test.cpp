// The built-in model's tensors directly (the one torch test file): output shapes, causality of
// the decoder, the stop-token target.
#include <torch/types.h>

#include <gtest/gtest.h>

#include "model/transformer_tts.h"

namespace sluice::model {
namespace {

struct Inputs {
  torch::Tensor tokens, token_lens, mels, mel_lens;
};

Inputs make_inputs(int64_t batch, int64_t max_tokens, int64_t frames, int64_t n_mels, int64_t vocab) {
  torch::manual_seed(3);
  Inputs in;
  in.tokens = torch::randint(1, vocab, {batch, max_tokens}, torch::kLong);
  in.token_lens = torch::tensor(std::vector<int64_t>{max_tokens, max_tokens - 2, 1}).narrow(0, 0, batch);
  in.mels = torch::randn({batch, frames, n_mels});
  in.mel_lens = torch::tensor(std::vector<int64_t>{frames, frames - 4, 2}).narrow(0, 0, batch);
  return in;
}

TransformerTts make_net(int64_t vocab, int64_t n_mels) {
  torch::manual_seed(1);
  TransformerTts net(transformer_sizes("tiny"), vocab, n_mels, /*dropout=*/0.0, /*prenet_dropout=*/0.0);
  net->eval();
  return net;
}

TEST(TransformerTts, OutputShapes) {
  torch::set_num_threads(1);
  auto net = make_net(30, 12);
  const Inputs in = make_inputs(3, 7, 11, 12, 30);
  torch::NoGradGuard no_grad;
  const TtsOutputs out = net->forward(in.tokens, in.token_lens, in.mels, in.mel_lens);
  EXPECT_EQ(out.mel_before.sizes(), (std::vector<int64_t>{3, 11, 12}));
  EXPECT_EQ(out.mel_after.sizes(), (std::vector<int64_t>{3, 11, 12}));
  EXPECT_EQ(out.stop_logits.sizes(), (std::vector<int64_t>{3, 11}));
  EXPECT_EQ(out.frame_valid.sizes(), (std::vector<int64_t>{3, 11}));
  EXPECT_EQ(out.mel_before.scalar_type(), torch::kFloat);
  EXPECT_EQ(out.frame_valid.sum().item<int64_t>(), 11 + 7 + 2);
  EXPECT_TRUE(torch::isfinite(out.mel_after).all().item<bool>());
  // Targets are the inputs with padding zeroed.
  EXPECT_EQ(out.mel_target[2].narrow(0, 2, 9).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(out.mel_target[0], in.mels[0]));

  const LossTerms loss = tts_loss(out, in.mel_lens);
  EXPECT_EQ(loss.total.dim(), 0);
  EXPECT_NEAR(loss.total.item<float>(), (loss.mel + loss.postnet + loss.stop).item<float>(), 1e-6);
}

// Teacher forcing with a causal decoder: frame k of the input mels may only influence the
// decoder's predictions for frames > k (mel_before and stop; the postnet mixes neighbours).
TEST(TransformerTts, DecoderIsCausal) {
  torch::set_num_threads(1);
  auto net = make_net(30, 12);
  Inputs in = make_inputs(3, 7, 11, 12, 30);
  torch::NoGradGuard no_grad;
  const TtsOutputs before = net->forward(in.tokens, in.token_lens, in.mels, in.mel_lens);
  const int64_t k = 5;
  in.mels.index_put_({0, k}, in.mels.index({0, k}) + 3.0);
  const TtsOutputs after = net->forward(in.tokens, in.token_lens, in.mels, in.mel_lens);
  EXPECT_TRUE(torch::equal(before.mel_before[0].narrow(0, 0, k + 1), after.mel_before[0].narrow(0, 0, k + 1)));
  EXPECT_TRUE(torch::equal(before.stop_logits[0].narrow(0, 0, k + 1), after.stop_logits[0].narrow(0, 0, k + 1)));
  EXPECT_GT((before.mel_before[0][k + 1] - after.mel_before[0][k + 1]).abs().max().item<float>(), 1e-4);
  // Other samples are untouched.
  EXPECT_TRUE(torch::equal(before.mel_after[1], after.mel_after[1]));
}

// The stop loss is balanced: all-zero logits give BCE log(2) on both classes, and a perfect
// prediction of the last frame gives ~0.
TEST(TransformerTts, StopLossTargetsTheLastValidFrame) {
  const int64_t batch = 2, frames = 6, n_mels = 4;
  TtsOutputs out;
  out.mel_target = torch::zeros({batch, frames, n_mels});
  out.mel_before = out.mel_target.clone();
  out.mel_after = out.mel_target.clone();
  auto mel_lens = torch::tensor(std::vector<int64_t>{6, 3});
  out.frame_valid = torch::arange(frames).unsqueeze(0) < mel_lens.unsqueeze(1);
  out.stop_logits = torch::zeros({batch, frames});
  LossTerms zero = tts_loss(out, mel_lens);
  // 9 valid frames, 2 positives, pos_weight 7/2: (7 * log2 + 2 * 3.5 * log2) / 9.
  EXPECT_NEAR(zero.stop.item<float>(), 14.0 * std::log(2.0) / 9.0, 1e-6);
  EXPECT_EQ(zero.mel.item<float>(), 0.0f);
  out.stop_logits = torch::full({batch, frames}, -30.0);
  out.stop_logits.index_put_({0, 5}, 30.0);
  out.stop_logits.index_put_({1, 2}, 30.0);
  out.stop_logits.index_put_({1, 4}, 30.0);  // padding: ignored
  EXPECT_LT(tts_loss(out, mel_lens).stop.item<float>(), 1e-6);
}

TEST(TransformerTts, UnknownSizeIsAConfigError) {
  EXPECT_ANY_THROW(transformer_sizes("medium"));
}

}  // namespace
}  // namespace sluice::model
