// Bring-your-own model: a TorchScript module whose forward() returns the loss (contract in
// model_config.h, ModelConfig::torchscript_path).
#include <sstream>

#include <torch/script.h>

#include "common/error.h"
#include "model/acoustic_model.h"

namespace sluice::model {
namespace {

class TorchScriptAcousticModel : public AcousticModel {
 public:
  explicit TorchScriptAcousticModel(const ModelConfig& config) : path_(config.torchscript_path) {
    try {
      module_ = torch::jit::load(path_);
    } catch (const c10::Error& e) {
      throw ConfigError("model.torchscript_path '" + path_ + "' cannot be loaded as TorchScript: " +
                        e.what_without_backtrace() +
                        " (write it with torch.jit.script(model).save(path), from a torch no newer than "
                        "this libtorch)");
    }
    auto forward = module_.find_method("forward");
    if (!forward) {
      throw ConfigError("model.torchscript_path '" + path_ + "' has no forward() method");
    }
    const auto& arguments = forward->function().getSchema().arguments();
    if (arguments.size() != 5) {  // self + tokens, token_lens, mels, mel_lens
      throw ConfigError("model.torchscript_path '" + path_ + "': forward() takes " +
                        std::to_string(arguments.size() - 1) +
                        " inputs; it must take (tokens, token_lens, mels, mel_lens) and return the loss");
    }
    module_.train(true);
  }

  LossTerms loss(const BatchTensors& batch) override {
    auto result = module_.forward({batch.tokens, batch.token_lens, batch.mels, batch.mel_lens});
    if (!result.isTensor() || result.toTensor().numel() != 1 || !result.toTensor().is_floating_point()) {
      throw ConfigError("model.torchscript_path '" + path_ +
                        "': forward() must return the loss as a floating-point scalar Tensor, got " +
                        result.tagKind());
    }
    LossTerms terms;
    terms.total = result.toTensor().reshape({}).to(torch::kFloat);
    return terms;
  }

  NamedTensors named_parameters() const override {
    NamedTensors named;
    for (const auto& item : module_.named_parameters(true)) {
      if (item.value.requires_grad()) named.emplace_back(item.name, item.value);
    }
    return named;
  }

  NamedTensors named_buffers() const override {
    NamedTensors named;
    for (const auto& item : module_.named_buffers(true)) named.emplace_back(item.name, item.value);
    return named;
  }

  void set_training(bool training) override { module_.train(training); }
  void to(const torch::Device& device) override { module_.to(device); }

  std::string describe() const override { return "torchscript " + path_; }

 private:
  std::string path_;
  torch::jit::Module module_;
};

}  // namespace

std::unique_ptr<AcousticModel> load_torchscript_model(const ModelConfig& config) {
  return std::make_unique<TorchScriptAcousticModel>(config);
}

}  // namespace sluice::model
