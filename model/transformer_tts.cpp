#include "model/transformer_tts.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <torch/nn/functional.h>

#include "common/error.h"

namespace sluice::model {
namespace {

namespace F = torch::nn::functional;

// [length, d_model] sinusoids (sin on the first half of the channels, cos on the second).
torch::Tensor sinusoids(int64_t length, int64_t d_model, const torch::TensorOptions& options) {
  const int64_t half = d_model / 2;
  auto position = torch::arange(length, options).unsqueeze(1);
  auto inv_freq = torch::exp(torch::arange(half, options) * (-std::log(10000.0) / static_cast<double>(half)));
  auto angle = position * inv_freq.unsqueeze(0);
  auto table = torch::cat({torch::sin(angle), torch::cos(angle)}, 1);
  if (table.size(1) < d_model) table = F::pad(table, F::PadFuncOptions({0, d_model - table.size(1)}));
  return table;
}

// [B, L] bool: position < lengths[b].
torch::Tensor valid_positions(const torch::Tensor& lengths, int64_t length) {
  return torch::arange(length, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
}

}  // namespace

AttentionImpl::AttentionImpl(int64_t d_model, int64_t heads, double dropout) : heads_(heads), dropout_(dropout) {
  q_ = register_module("q", torch::nn::Linear(d_model, d_model));
  kv_ = register_module("kv", torch::nn::Linear(d_model, 2 * d_model));
  out_ = register_module("out", torch::nn::Linear(d_model, d_model));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& query, const torch::Tensor& memory,
                                     const torch::Tensor& blocked) {
  const int64_t batch = query.size(0), lq = query.size(1), lk = memory.size(1), d_model = query.size(2);
  const int64_t head_dim = d_model / heads_;
  auto q = q_(query).view({batch, lq, heads_, head_dim}).transpose(1, 2);
  auto kv = kv_(memory).view({batch, lk, 2, heads_, head_dim}).permute({2, 0, 3, 1, 4});
  auto scores = torch::matmul(q, kv[0].transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  scores = scores.masked_fill(blocked, -std::numeric_limits<float>::infinity());
  auto weights = F::dropout(torch::softmax(scores, -1), F::DropoutFuncOptions().p(dropout_).training(is_training()));
  auto context = torch::matmul(weights, kv[1]).transpose(1, 2).reshape({batch, lq, d_model});
  return out_(context);
}

FeedForwardImpl::FeedForwardImpl(int64_t d_model, int64_t ffn_dim, double dropout) : dropout_(dropout) {
  in_ = register_module("in", torch::nn::Linear(d_model, ffn_dim));
  out_ = register_module("out", torch::nn::Linear(ffn_dim, d_model));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  auto hidden = F::dropout(torch::relu(in_(x)), F::DropoutFuncOptions().p(dropout_).training(is_training()));
  return out_(hidden);
}

EncoderLayerImpl::EncoderLayerImpl(const TransformerSizes& sizes, double dropout) : dropout_(dropout) {
  attention_norm_ = register_module("attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({sizes.d_model})));
  attention_ = register_module("attention", Attention(sizes.d_model, sizes.heads, dropout));
  ffn_norm_ = register_module("ffn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({sizes.d_model})));
  ffn_ = register_module("ffn", FeedForward(sizes.d_model, sizes.ffn_dim, dropout));
}

torch::Tensor EncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& token_blocked) {
  const auto drop = F::DropoutFuncOptions().p(dropout_).training(is_training());
  auto normed = attention_norm_(x);
  auto y = x + F::dropout(attention_(normed, normed, token_blocked), drop);
  return y + F::dropout(ffn_(ffn_norm_(y)), drop);
}

DecoderLayerImpl::DecoderLayerImpl(const TransformerSizes& sizes, double dropout) : dropout_(dropout) {
  const auto norm = torch::nn::LayerNormOptions({sizes.d_model});
  self_norm_ = register_module("self_norm", torch::nn::LayerNorm(norm));
  self_attention_ = register_module("self_attention", Attention(sizes.d_model, sizes.heads, dropout));
  cross_norm_ = register_module("cross_norm", torch::nn::LayerNorm(norm));
  cross_attention_ = register_module("cross_attention", Attention(sizes.d_model, sizes.heads, dropout));
  ffn_norm_ = register_module("ffn_norm", torch::nn::LayerNorm(norm));
  ffn_ = register_module("ffn", FeedForward(sizes.d_model, sizes.ffn_dim, dropout));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                        const torch::Tensor& causal_blocked, const torch::Tensor& token_blocked) {
  const auto drop = F::DropoutFuncOptions().p(dropout_).training(is_training());
  auto normed = self_norm_(x);
  auto y = x + F::dropout(self_attention_(normed, normed, causal_blocked), drop);
  y = y + F::dropout(cross_attention_(cross_norm_(y), memory, token_blocked), drop);
  return y + F::dropout(ffn_(ffn_norm_(y)), drop);
}

TransformerTtsImpl::TransformerTtsImpl(const TransformerSizes& sizes, int64_t vocab_size, int64_t n_mels,
                                       double dropout, double prenet_dropout)
    : sizes_(sizes), n_mels_(n_mels), dropout_(dropout), prenet_dropout_(prenet_dropout) {
  const int64_t d = sizes.d_model;
  embedding_ = register_module("embedding", torch::nn::Embedding(vocab_size, d));
  encoder_alpha_ = register_parameter("encoder_alpha", torch::ones({1}));
  for (int64_t i = 0; i < sizes.encoder_layers; ++i) encoder_layers_->push_back(EncoderLayer(sizes, dropout));
  register_module("encoder_layers", encoder_layers_);
  encoder_norm_ = register_module("encoder_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));

  prenet_in_ = register_module("prenet_in", torch::nn::Linear(n_mels, sizes.prenet_dim));
  prenet_hidden_ = register_module("prenet_hidden", torch::nn::Linear(sizes.prenet_dim, sizes.prenet_dim));
  prenet_project_ = register_module("prenet_project", torch::nn::Linear(sizes.prenet_dim, d));
  decoder_alpha_ = register_parameter("decoder_alpha", torch::ones({1}));
  for (int64_t i = 0; i < sizes.decoder_layers; ++i) decoder_layers_->push_back(DecoderLayer(sizes, dropout));
  register_module("decoder_layers", decoder_layers_);
  decoder_norm_ = register_module("decoder_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  mel_head_ = register_module("mel_head", torch::nn::Linear(d, n_mels));
  stop_head_ = register_module("stop_head", torch::nn::Linear(d, 1));

  for (int64_t i = 0; i < sizes.postnet_layers; ++i) {
    const int64_t in = i == 0 ? n_mels : sizes.postnet_channels;
    const int64_t out = i + 1 == sizes.postnet_layers ? n_mels : sizes.postnet_channels;
    postnet_->push_back(torch::nn::Conv1d(
        torch::nn::Conv1dOptions(in, out, sizes.postnet_kernel).padding(sizes.postnet_kernel / 2)));
  }
  register_module("postnet", postnet_);
}

TtsOutputs TransformerTtsImpl::forward(const torch::Tensor& tokens, const torch::Tensor& token_lens,
                                       const torch::Tensor& mels, const torch::Tensor& mel_lens) {
  const int64_t batch = mels.size(0), frames = mels.size(1), max_tokens = tokens.size(1);
  const auto drop = F::DropoutFuncOptions().p(dropout_).training(is_training());
  // Prenet dropout ignores the train/eval mode on purpose (see ModelConfig::prenet_dropout).
  const auto prenet_drop = F::DropoutFuncOptions().p(prenet_dropout_).training(true);
  const auto float_options = mels.options().dtype(torch::kFloat);

  // Padding is replaced by zeros before use: ids past token_lens may be anything (even out of
  // the vocabulary) and frames past mel_lens may hold NaN without touching the valid outputs.
  auto token_valid = valid_positions(token_lens, max_tokens);
  auto token_blocked = token_valid.logical_not().view({batch, 1, 1, max_tokens});
  auto x = embedding_(torch::where(token_valid, tokens, torch::zeros_like(tokens)));
  x = F::dropout(x + encoder_alpha_ * sinusoids(max_tokens, sizes_.d_model, float_options), drop);
  for (const auto& layer : *encoder_layers_) x = layer->as<EncoderLayerImpl>()->forward(x, token_blocked);
  auto memory = encoder_norm_(x);

  auto frame_valid = valid_positions(mel_lens, frames);
  auto frame_valid3 = frame_valid.unsqueeze(2);
  auto target = torch::where(frame_valid3, mels, torch::zeros_like(mels));
  // Teacher forcing: the decoder sees frame t-1 when predicting frame t; frame 0 sees zeros.
  auto previous = torch::cat({torch::zeros({batch, 1, n_mels_}, float_options), target.narrow(1, 0, frames - 1)}, 1);
  auto y = F::dropout(torch::relu(prenet_in_(previous)), prenet_drop);
  y = F::dropout(torch::relu(prenet_hidden_(y)), prenet_drop);
  y = F::dropout(prenet_project_(y) + decoder_alpha_ * sinusoids(frames, sizes_.d_model, float_options), drop);
  auto causal_blocked =
      torch::ones({frames, frames}, mels.options().dtype(torch::kBool)).triu(1).view({1, 1, frames, frames});
  for (const auto& layer : *decoder_layers_) {
    y = layer->as<DecoderLayerImpl>()->forward(y, memory, causal_blocked, token_blocked);
  }
  y = decoder_norm_(y);

  auto mel_before = mel_head_(y).to(torch::kFloat);
  auto stop_logits = stop_head_(y).squeeze(-1).to(torch::kFloat);

  // Postnet over time; zero past mel_lens after every layer so that each sample sees exactly
  // the zero padding it would see alone, whatever the batch's padded length.
  auto frame_valid_channels = frame_valid.unsqueeze(1);  // [B, 1, F]
  auto h = torch::where(frame_valid3, mel_before, torch::zeros_like(mel_before)).transpose(1, 2);
  const size_t layers = postnet_->size();
  for (size_t i = 0; i < layers; ++i) {
    h = postnet_[i]->as<torch::nn::Conv1dImpl>()->forward(h);
    if (i + 1 < layers) h = F::dropout(torch::tanh(h), drop);
    h = torch::where(frame_valid_channels, h, torch::zeros_like(h));
  }
  auto mel_after = mel_before + h.transpose(1, 2).to(torch::kFloat);
  return {mel_before, mel_after, stop_logits, frame_valid, target};
}

LossTerms tts_loss(const TtsOutputs& outputs, const torch::Tensor& mel_lens) {
  const auto& valid = outputs.frame_valid;
  auto valid3 = valid.unsqueeze(2);
  const double n_mels = static_cast<double>(outputs.mel_target.size(2));
  auto valid_frames = valid.sum().to(torch::kFloat);
  auto masked_l1 = [&](const torch::Tensor& prediction) {
    auto error = (prediction - outputs.mel_target).abs();
    return torch::where(valid3, error, torch::zeros_like(error)).sum() / (valid_frames * n_mels);
  };
  LossTerms terms;
  terms.mel = masked_l1(outputs.mel_before);
  terms.postnet = masked_l1(outputs.mel_after);

  const int64_t frames = valid.size(1);
  auto last = torch::arange(frames, mel_lens.options()).unsqueeze(0) == (mel_lens - 1).unsqueeze(1);
  auto positives = static_cast<double>(mel_lens.size(0));
  auto pos_weight = ((valid_frames - positives) / positives).clamp_min(1.0).reshape({1});
  terms.stop = torch::binary_cross_entropy_with_logits(outputs.stop_logits, last.to(torch::kFloat),
                                                       valid.to(torch::kFloat), pos_weight, at::Reduction::Sum) /
               valid_frames;
  terms.total = terms.mel + terms.postnet + terms.stop;
  return terms;
}

namespace {

class TransformerAcousticModel : public AcousticModel {
 public:
  explicit TransformerAcousticModel(const ModelConfig& config)
      : config_(config),
        sizes_(transformer_sizes(config.size)),
        net_(sizes_, config.vocab_size, config.n_mels, config.dropout, config.prenet_dropout) {}

  LossTerms loss(const BatchTensors& batch) override {
    return tts_loss(net_->forward(batch.tokens, batch.token_lens, batch.mels, batch.mel_lens), batch.mel_lens);
  }

  NamedTensors named_parameters() const override {
    NamedTensors named;
    for (const auto& item : net_->named_parameters(true)) named.emplace_back(item.key(), item.value());
    return named;
  }

  NamedTensors named_buffers() const override {
    NamedTensors named;
    for (const auto& item : net_->named_buffers(true)) named.emplace_back(item.key(), item.value());
    return named;
  }

  void set_training(bool training) override { net_->train(training); }
  void to(const torch::Device& device) override { net_->to(device); }

  std::string describe() const override {
    std::ostringstream out;
    out << "transformer " << config_.size << " (d_model " << sizes_.d_model << ", heads " << sizes_.heads
        << ", encoder/decoder layers " << sizes_.encoder_layers << "/" << sizes_.decoder_layers << ", ffn "
        << sizes_.ffn_dim << ", prenet " << sizes_.prenet_dim << ", postnet " << sizes_.postnet_layers << "x"
        << sizes_.postnet_channels << " k" << sizes_.postnet_kernel << "; vocab " << config_.vocab_size
        << ", n_mels " << config_.n_mels << ", dropout " << config_.dropout << ", prenet dropout "
        << config_.prenet_dropout << " in train and eval)";
    return out.str();
  }

 private:
  ModelConfig config_;
  TransformerSizes sizes_;
  TransformerTts net_;
};

}  // namespace

std::unique_ptr<AcousticModel> make_transformer_tts(const ModelConfig& config) {
  return std::make_unique<TransformerAcousticModel>(config);
}

}  // namespace sluice::model
