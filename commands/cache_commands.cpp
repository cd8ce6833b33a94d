#include "commands/cache_commands.h"

#include <iostream>

#include "cache/cache_inspector.h"
#include "cache/cache_verifier.h"

namespace sluice::runtime {

int run_cache_verify(const std::filesystem::path& dir) {
  const cache::VerifyResult result = cache::verify_cache(dir);
  std::cout << result.to_text();
  return result.ok() ? 0 : 1;
}

int run_cache_inspect(const std::filesystem::path& dir, bool as_json) {
  const cache::InspectResult result = cache::inspect_cache(dir);
  std::cout << (as_json ? result.to_json().dump(2) + "\n" : result.to_text());
  return 0;
}

}  // namespace sluice::runtime
