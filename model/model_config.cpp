#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace sluice::model {
namespace {

constexpr double kPi = 3.14159265358979323846;

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

}  // namespace

void validate(const ModelConfig& config) {
  require(config.kind == "transformer" || config.kind == "torchscript",
          "model.kind '" + config.kind + "' is unknown; use 'transformer' (built-in) or 'torchscript'");
  if (config.kind == "transformer") {
    require(config.size == "tiny" || config.size == "small" || config.size == "base",
            "model.size '" + config.size + "' is unknown; use tiny, small or base");
  } else {
    require(!config.torchscript_path.empty(),
            "model.torchscript_path is empty but model.kind is 'torchscript'; set it to the file "
            "written by torch.jit.script(model).save(path)");
  }
  require(config.vocab_size >= 1, "model.vocab_size must be >= 1, got " + std::to_string(config.vocab_size));
  require(config.n_mels >= 1, "model.n_mels must be >= 1, got " + std::to_string(config.n_mels));
  require(config.dropout >= 0.0 && config.dropout < 1.0,
          "model.dropout must be in [0, 1), got " + std::to_string(config.dropout));
  require(config.prenet_dropout >= 0.0 && config.prenet_dropout < 1.0,
          "model.prenet_dropout must be in [0, 1), got " + std::to_string(config.prenet_dropout));
  const bool cuda = config.device.rfind("cuda", 0) == 0;
  require(config.device == "cpu" || cuda,
          "model.device '" + config.device + "' is unknown; use 'cpu' or 'cuda:N'");
  require(!config.bf16_autocast || cuda,
          "model.bf16_autocast needs a CUDA device but model.device is '" + config.device +
              "'; set bf16_autocast: false on CPU");
}

void validate(const OptimizerConfig& config) {
  require(config.lr > 0.0 && std::isfinite(config.lr), "optimizer.lr must be > 0, got " + std::to_string(config.lr));
  for (double beta : config.betas) {
    require(beta >= 0.0 && beta < 1.0, "optimizer.betas must each be in [0, 1), got " + std::to_string(beta));
  }
  require(config.eps > 0.0, "optimizer.eps must be > 0, got " + std::to_string(config.eps));
  require(config.weight_decay >= 0.0, "optimizer.weight_decay must be >= 0, got " + std::to_string(config.weight_decay));
  require(config.warmup_steps >= 0, "optimizer.warmup_steps must be >= 0, got " + std::to_string(config.warmup_steps));
  require(config.decay == "inverse_sqrt" || config.decay == "cosine" || config.decay == "constant",
          "optimizer.decay '" + config.decay + "' is unknown; use inverse_sqrt, cosine or constant");
  if (config.decay == "cosine") {
    require(config.total_steps > config.warmup_steps,
            "optimizer.total_steps (" + std::to_string(config.total_steps) +
                ") must exceed optimizer.warmup_steps (" + std::to_string(config.warmup_steps) +
                ") for cosine decay");
    require(config.min_lr_ratio >= 0.0 && config.min_lr_ratio <= 1.0,
            "optimizer.min_lr_ratio must be in [0, 1], got " + std::to_string(config.min_lr_ratio));
  }
  require(config.grad_clip_norm >= 0.0,
          "optimizer.grad_clip_norm must be >= 0 (0 disables clipping), got " + std::to_string(config.grad_clip_norm));
  require(config.accumulation_steps >= 1,
          "optimizer.accumulation_steps must be >= 1, got " + std::to_string(config.accumulation_steps));
}

double learning_rate(const OptimizerConfig& config, int64_t step) {
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  const double warmup = static_cast<double>(config.warmup_steps);
  if (config.warmup_steps > 0 && s <= warmup) return config.lr * s / warmup;
  if (config.decay == "inverse_sqrt") return config.lr * std::sqrt(std::max(warmup, 1.0) / s);
  if (config.decay == "cosine") {
    const double span = static_cast<double>(config.total_steps) - warmup;
    const double progress = std::min(1.0, (s - warmup) / span);
    const double cosine = 0.5 * (1.0 + std::cos(kPi * progress));
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine);
  }
  return config.lr;
}

TransformerSizes transformer_sizes(const std::string& size) {
  //                     d    heads enc dec ffn   prenet postnet
  if (size == "tiny") return {128, 2, 2, 2, 512, 128, 64};
  if (size == "small") return {256, 4, 4, 4, 1024, 256, 256};
  if (size == "base") return {512, 8, 6, 6, 2048, 256, 512};
  throw ConfigError("model.size '" + size + "' is unknown; use tiny, small or base");
}

double transformer_training_flops(const TransformerSizes& s, int64_t batch, int64_t tokens, int64_t frames,
                                  int64_t n_mels) {
  const auto d = static_cast<double>(s.d_model), f = static_cast<double>(s.ffn_dim);
  const auto t = static_cast<double>(tokens), n = static_cast<double>(frames), m = static_cast<double>(n_mels);
  const auto p = static_cast<double>(s.prenet_dim), c = static_cast<double>(s.postnet_channels);
  // Multiply-adds per sample. Encoder layer, per token: q, k, v, out (4 d^2), scores and values
  // over the tokens (2 t d), the feed-forward (2 d f).
  const double encoder = static_cast<double>(s.encoder_layers) * t * (4 * d * d + 2 * t * d + 2 * d * f);
  // Decoder layer, per frame: self-attention (4 d^2 + 2 n d), cross-attention's q and out (2 d^2)
  // and its scores and values over the tokens (2 t d), the feed-forward; the memory's k and v once
  // per token (2 d^2 t).
  const double decoder = static_cast<double>(s.decoder_layers) *
                         (n * (6 * d * d + 2 * n * d + 2 * t * d + 2 * d * f) + 2 * d * d * t);
  // Prenet (mels -> prenet -> prenet -> d), the mel and stop projections, the postnet's
  // convolutions (mels -> c, c -> c, ..., c -> mels).
  const double frame_layers = n * (m * p + p * p + p * d + d * m + d);
  const double postnet = n * static_cast<double>(s.postnet_kernel) *
                         (2 * m * c + static_cast<double>(s.postnet_layers - 2) * c * c);
  return 3 * 2 * static_cast<double>(batch) * (encoder + decoder + frame_layers + postnet);
}

}  // namespace sluice::model
