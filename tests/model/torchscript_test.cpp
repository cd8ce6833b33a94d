// Bring-your-own model: a TorchScript module scripted by Debian's python3-torch at test time
// (tests/model/make_scripted_model.py) is trained by the same Trainer.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <stdio.h>  // popen
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/trainer.h"
#include "model_test_util.h"

namespace sluice::model {
namespace {

namespace fs = std::filesystem;
constexpr int kMels = 10;
constexpr int kVocab = 20;

class TorchScriptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("sluice-torchscript-test-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    set_compute_threads(1);
    if (python_torch_version().empty()) {
      GTEST_SKIP() << SLUICE_SYSTEM_PYTHON << " cannot import torch (Debian: apt-get install python3-torch)";
    }
  }

  // torch.__version__ of the system Python, or "" when it has no torch.
  static std::string python_torch_version() {
    static const std::string version = [] {
      const std::string command =
          std::string(SLUICE_SYSTEM_PYTHON) + " -c 'import torch; print(torch.__version__)' 2>/dev/null";
      std::string out;
      if (FILE* pipe = ::popen(command.c_str(), "r")) {
        char buffer[256];
        while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
        if (::pclose(pipe) != 0) out.clear();
      }
      while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
      return out;
    }();
    return version;
  }

  static fs::path script(const std::string& name, const std::string& flags = "") {
    const fs::path out = *dir_ / name;
    if (!fs::exists(out)) {
      const std::string command = std::string(SLUICE_SYSTEM_PYTHON) + " " + SLUICE_MODEL_TEST_DIR +
                                  "/make_scripted_model.py " + out.string() + " " + std::to_string(kVocab) + " " +
                                  std::to_string(kMels) + " " + flags;
      EXPECT_EQ(std::system(command.c_str()), 0) << command;
    }
    return out;
  }

  static ModelConfig config_for(const fs::path& path) {
    ModelConfig config;
    config.kind = "torchscript";
    config.torchscript_path = path.string();
    config.vocab_size = kVocab;
    config.n_mels = kMels;
    return config;
  }

  static fs::path* dir_;
};
fs::path* TorchScriptTest::dir_ = nullptr;

// TorchScript files from a newer torch may not load into an older libtorch: the test's Python
// torch (Debian python3-torch, which reports 1.13.0a0) must be the same major.minor as the C++
// libtorch (Debian libtorch-dev 1.13.1), i.e. the same source package.
TEST_F(TorchScriptTest, PythonTorchMatchesLibtorch) {
  const std::string python = python_torch_version();
  const std::string libtorch = SLUICE_LIBTORCH_VERSION;
  auto major_minor = [](const std::string& version) {
    const size_t first = version.find('.');
    return version.substr(0, version.find('.', first + 1));
  };
  std::printf("[ versions ] python torch %s, libtorch %s\n", python.c_str(), libtorch.c_str());
  EXPECT_EQ(major_minor(python), major_minor(libtorch));
}

TEST_F(TorchScriptTest, ScriptedModelTrainsAndResumes) {
  const fs::path path = script("frame_predictor.pt");
  OptimizerConfig optimizer = testing::constant_lr(3e-3);
  Trainer trainer(config_for(path), optimizer, 5);
  EXPECT_GT(trainer.parameter_count(), 0);
  EXPECT_NE(trainer.describe().find("torchscript"), std::string::npos);
  const auto batch = testing::make_batch(4, 8, 30, kMels, kVocab, 2);
  StepResult first, last;
  for (int step = 0; step < 40; ++step) {
    const StepResult r = trainer.train_step(batch.view());
    if (step == 0) first = r;
    last = r;
  }
  std::printf("[ torchscript ] loss %.4f -> %.4f over 40 steps\n", first.loss, last.loss);
  EXPECT_TRUE(std::isnan(first.mel_loss));  // the module reports only its total
  EXPECT_LT(last.loss, 0.7 * first.loss);

  // Checkpoints work for scripted parameters too.
  const fs::path checkpoint = *dir_ / "scripted.ckpt";
  trainer.save_checkpoint(checkpoint, {{"epoch", 1}});
  Trainer resumed(config_for(path), optimizer, 6);
  resumed.load_checkpoint(checkpoint);
  EXPECT_EQ(resumed.parameters_snapshot(), trainer.parameters_snapshot());
  EXPECT_EQ(resumed.train_step(batch.view()).loss, trainer.train_step(batch.view()).loss);
}

TEST_F(TorchScriptTest, WrongForwardSignatureIsAConfigError) {
  const fs::path path = script("wrong_arity.pt", "--wrong-arity");
  try {
    Trainer trainer(config_for(path), OptimizerConfig{}, 1);
    ADD_FAILURE() << "a forward() with two inputs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("takes 2 inputs"), std::string::npos) << e.what();
  }
}

TEST_F(TorchScriptTest, UnreadableFileIsAConfigError) {
  EXPECT_THROW(Trainer(config_for(*dir_ / "absent.pt"), OptimizerConfig{}, 1), ConfigError);
}

}  // namespace
}  // namespace sluice::model
