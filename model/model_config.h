#pragma once
// Settings of the acoustic model and its optimiser, and the learning-rate schedule. No torch.
// The launcher maps the `model:` and `optimizer:` config sections onto these structs; every
// default works for the quick start (tiny model on CPU).
#include <array>
#include <cstdint>
#include <string>

namespace sluice::model {

struct ModelConfig {
  // "transformer": the built-in Transformer TTS (model/transformer_tts.h).
  // "torchscript": a user's TorchScript module, see torchscript_path.
  std::string kind = "transformer";
  // Built-in model size: "tiny" | "small" | "base" (table in transformer_tts.cpp, describe()).
  std::string size = "tiny";
  // kind == "torchscript": file written by torch.jit.script(m).save(path). Its contract:
  //   forward(tokens: int64 [B,T], token_lens: int64 [B], mels: float32 [B,F,n_mels],
  //           mel_lens: int64 [B]) -> Tensor   (a scalar: the loss to minimise)
  // Entries past token_lens / mel_lens are padding the module must mask itself. The inputs may
  // alias the caller's batch buffers: the module must not modify them in place. All of its
  // parameters with requires_grad are trained. Write it with a torch whose file format this
  // libtorch reads (same major.minor, or older).
  std::string torchscript_path;
  int vocab_size = 256;  // token ids must lie in [0, vocab_size)
  int n_mels = 80;
  // Dropout of attention weights, residual branches, embeddings and postnet (train mode only).
  double dropout = 0.1;
  // Decoder prenet dropout. Applied in train AND eval mode, as in Tacotron 2: without it the
  // teacher-forced decoder learns to copy the previous frame and free-running inference fails.
  // Eval mode draws its masks from a fixed seed, so validation_loss is deterministic.
  double prenet_dropout = 0.5;
  std::string device = "cpu";  // "cpu" or "cuda:N"
  bool bf16_autocast = false;  // CUDA only: forward in bfloat16 autocast, weights/grads fp32
};

struct OptimizerConfig {
  // AdamW. Weight decay applies to matrices/embeddings (dim >= 2) only, not to biases, norms or
  // the positional scales.
  double lr = 1e-3;  // peak learning rate
  std::array<double, 2> betas{0.9, 0.98};
  double eps = 1e-9;
  double weight_decay = 0.01;
  // Schedule (learning_rate() below): linear warmup over warmup_steps optimiser steps, then
  //   "inverse_sqrt": lr * sqrt(warmup_steps / step)  (Noam; with warmup 0: lr / sqrt(step))
  //   "cosine":       from lr down to lr * min_lr_ratio at total_steps, then flat
  //   "constant":     lr
  int64_t warmup_steps = 1000;
  std::string decay = "inverse_sqrt";
  int64_t total_steps = 0;    // cosine only; must exceed warmup_steps
  double min_lr_ratio = 0.0;  // cosine only
  double grad_clip_norm = 1.0;  // global L2 norm after reduction; 0 disables clipping
  // Micro-batches per optimiser step. Each micro-batch's loss is a mean over its own valid
  // frames and the step averages micro-batches with equal weight.
  int accumulation_steps = 1;
};

// The built-in Transformer TTS's dimensions (model/transformer_tts.h) of one model.size.
struct TransformerSizes {
  int64_t d_model;
  int64_t heads;
  int64_t encoder_layers;
  int64_t decoder_layers;
  int64_t ffn_dim;
  int64_t prenet_dim;
  int64_t postnet_channels;
  int64_t postnet_kernel = 5;
  int64_t postnet_layers = 5;
};

// "tiny" | "small" | "base"; throws ConfigError otherwise.
TransformerSizes transformer_sizes(const std::string& size);

// Floating-point operations of one training step of the built-in model on a padded batch of
// `batch` samples x `tokens` tokens x `frames` mel frames: the matrix products and convolutions
// (2 per multiply-add) of the forward pass, times 3 for forward + backward; attention's score and
// value products included, elementwise work left out. What a model FLOP utilisation divides.
double transformer_training_flops(const TransformerSizes& sizes, int64_t batch, int64_t tokens, int64_t frames,
                                  int64_t n_mels);

// Throw sluice::ConfigError naming the key ("model.size", "optimizer.lr", ...) and what to use.
void validate(const ModelConfig& config);
void validate(const OptimizerConfig& config);

// Learning rate of optimiser step `step` (1-based: the first step is 1).
double learning_rate(const OptimizerConfig& config, int64_t step);

}  // namespace sluice::model
