#include "commands/cache_command.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "cache/cache_inspector.h"
#include "cache/cache_verifier.h"

namespace sluice {

void CacheCommand::add(CLI::App& app) {
  auto* cache = app.add_subcommand("cache", "Check or summarise a finished cache");
  cache->require_subcommand(1);
  verify_ = cache->add_subcommand(
      "verify", "Read every chunk of every shard (fletcher32), check offsets, counts and fingerprint; "
                "exit 1 naming each faulty shard and sample; 2 when DIR does not exist");
  verify_->add_option("DIR", verify_dir_, "cache directory")->required()->check(CLI::ExistingDirectory);
  inspect_ = cache->add_subcommand(
      "inspect", "Totals, length histograms, per-language and per-speaker counts, vocabulary coverage");
  inspect_->add_option("DIR", inspect_dir_, "cache directory")->required()->check(CLI::ExistingDirectory);
  inspect_->add_flag("--json", inspect_json_, "print JSON instead of text");
}

std::optional<int> CacheCommand::run() const {
  if (*verify_) {
    // 0 when the cache is sound; 1 with every fault listed (shard file, sample) otherwise.
    const cache::VerifyResult result = cache::verify_cache(verify_dir_);
    std::cout << result.to_text();
    return result.ok() ? 0 : 1;
  }
  if (*inspect_) {
    const cache::InspectResult result = cache::inspect_cache(inspect_dir_);
    std::cout << (inspect_json_ ? result.to_json().dump(2) + "\n" : result.to_text());
    return 0;
  }
  return std::nullopt;
}

}  // namespace sluice
