#pragma once
// Private to model/ (includes torch): the seam between the Trainer and the two kinds of model,
// the built-in Transformer TTS and a user's TorchScript module. Never include this from a public
// header or from a file that includes spdlog (pip torch ships fmt 12 headers; spdlog uses fmt 9).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "model/model_config.h"

namespace sluice::model {

// A batch on the model's device. tokens, token_lens, mel_lens are int64; mels float32
// [B, F, n_mels]. mels may alias the caller's buffer: models must not write to it.
struct BatchTensors {
  torch::Tensor tokens;
  torch::Tensor token_lens;
  torch::Tensor mels;
  torch::Tensor mel_lens;
};

// Scalar float32 losses. mel/postnet/stop are undefined for a model that reports only a total.
struct LossTerms {
  torch::Tensor total;
  torch::Tensor mel;
  torch::Tensor postnet;
  torch::Tensor stop;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class AcousticModel {
 public:
  virtual ~AcousticModel() = default;
  // Teacher-forced loss of one batch, in the current train/eval mode and grad mode.
  virtual LossTerms loss(const BatchTensors& batch) = 0;
  // Trainable parameters and persistent buffers, in a fixed order (the checkpoint order).
  virtual NamedTensors named_parameters() const = 0;
  virtual NamedTensors named_buffers() const = 0;
  virtual void set_training(bool training) = 0;
  virtual void to(const torch::Device& device) = 0;
  virtual std::string describe() const = 0;
};

// The built-in Transformer TTS (transformer_tts.cpp). Weights come from torch's default
// generator: seed it first.
std::unique_ptr<AcousticModel> make_transformer_tts(const ModelConfig& config);

// config.torchscript_path loaded with torch::jit::load (torchscript_model.cpp). Throws
// ConfigError when the file cannot be loaded or its forward() does not take four inputs.
std::unique_ptr<AcousticModel> load_torchscript_model(const ModelConfig& config);

}  // namespace sluice::model
