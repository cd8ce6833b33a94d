#pragma once
// The command line of `sluice cache verify|inspect DIR`: checks and summaries of a finished cache
// (cache/cache_verifier.h, cache/cache_inspector.h). Runs without MPI.
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace sluice {

class CacheCommand {
 public:
  void add(CLI::App& app);
  // After parsing: the exit code when `cache verify` or `cache inspect` was chosen, else nullopt.
  std::optional<int> run() const;

 private:
  CLI::App *verify_ = nullptr, *inspect_ = nullptr;
  std::string verify_dir_, inspect_dir_;
  bool inspect_json_ = false;
};

}  // namespace sluice
