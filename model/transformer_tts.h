#pragma once
// Private to model/ (includes torch): the built-in Transformer TTS acoustic model.
//
//   tokens -> embedding + alpha_enc * sinusoid -> N pre-norm encoder layers -> memory
//   mels shifted right by one frame (zero go-frame) -> prenet (2 x Linear+ReLU+dropout, dropout
//   also in eval) -> Linear to d_model + alpha_dec * sinusoid -> N pre-norm decoder layers
//   (causal self-attention, cross-attention to memory, FFN) -> mel head, stop head
//   mel_before (frames past mel_lens zeroed) -> postnet (5 Conv1d k=5, tanh on the first 4,
//   re-masked after each) -> mel_after = mel_before + postnet
//
// alpha_enc/alpha_dec are learned scalars on the positional encodings (Li et al. 2019,
// "Neural Speech Synthesis with Transformer Network"). No batch norm anywhere, so padding never
// leaks into statistics: a batch's loss is unchanged by what lies past mel_lens / token_lens.
#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "model/acoustic_model.h"

namespace sluice::model {

// Multi-head attention, batch-first. `blocked` is bool, broadcastable to [B, heads, Lq, Lk],
// true where a query may not attend to a key. Every query must keep at least one key.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t d_model, int64_t heads, double dropout);
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& memory, const torch::Tensor& blocked);

 private:
  int64_t heads_;
  double dropout_;
  torch::nn::Linear q_{nullptr};
  torch::nn::Linear kv_{nullptr};
  torch::nn::Linear out_{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t d_model, int64_t ffn_dim, double dropout);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  double dropout_;
  torch::nn::Linear in_{nullptr};
  torch::nn::Linear out_{nullptr};
};
TORCH_MODULE(FeedForward);

class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl(const TransformerSizes& sizes, double dropout);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& token_blocked);

 private:
  double dropout_;
  torch::nn::LayerNorm attention_norm_{nullptr};
  Attention attention_{nullptr};
  torch::nn::LayerNorm ffn_norm_{nullptr};
  FeedForward ffn_{nullptr};
};
TORCH_MODULE(EncoderLayer);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const TransformerSizes& sizes, double dropout);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& causal_blocked,
                        const torch::Tensor& token_blocked);

 private:
  double dropout_;
  torch::nn::LayerNorm self_norm_{nullptr};
  Attention self_attention_{nullptr};
  torch::nn::LayerNorm cross_norm_{nullptr};
  Attention cross_attention_{nullptr};
  torch::nn::LayerNorm ffn_norm_{nullptr};
  FeedForward ffn_{nullptr};
};
TORCH_MODULE(DecoderLayer);

struct TtsOutputs {
  torch::Tensor mel_before;   // float [B, F, n_mels]
  torch::Tensor mel_after;    // float [B, F, n_mels]
  torch::Tensor stop_logits;  // float [B, F]
  torch::Tensor frame_valid;  // bool [B, F]: frame < mel_lens
  torch::Tensor mel_target;   // float [B, F, n_mels]: the input mels, zero past mel_lens
};

class TransformerTtsImpl : public torch::nn::Module {
 public:
  TransformerTtsImpl(const TransformerSizes& sizes, int64_t vocab_size, int64_t n_mels, double dropout,
                     double prenet_dropout);
  // tokens/token_lens/mel_lens int64, mels float [B, F, n_mels] (the targets; the decoder input
  // is derived from them by teacher forcing).
  TtsOutputs forward(const torch::Tensor& tokens, const torch::Tensor& token_lens, const torch::Tensor& mels,
                     const torch::Tensor& mel_lens);

 private:
  TransformerSizes sizes_;
  int64_t n_mels_;
  double dropout_;
  double prenet_dropout_;
  torch::nn::Embedding embedding_{nullptr};
  torch::Tensor encoder_alpha_;
  torch::nn::ModuleList encoder_layers_;
  torch::nn::LayerNorm encoder_norm_{nullptr};
  torch::nn::Linear prenet_in_{nullptr};
  torch::nn::Linear prenet_hidden_{nullptr};
  torch::nn::Linear prenet_project_{nullptr};
  torch::Tensor decoder_alpha_;
  torch::nn::ModuleList decoder_layers_;
  torch::nn::LayerNorm decoder_norm_{nullptr};
  torch::nn::Linear mel_head_{nullptr};
  torch::nn::Linear stop_head_{nullptr};
  torch::nn::ModuleList postnet_;
};
TORCH_MODULE(TransformerTts);

// mel: masked L1 of mel_before; postnet: masked L1 of mel_after (means over valid frames x
// n_mels); stop: BCE on stop_logits over valid frames, target 1 at frame mel_lens-1 only, with
// pos_weight = negatives/positives of this batch so both classes weigh the same; total = sum.
LossTerms tts_loss(const TtsOutputs& outputs, const torch::Tensor& mel_lens);

}  // namespace sluice::model
