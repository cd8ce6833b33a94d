#pragma once
// `sluice cache verify DIR` and `sluice cache inspect DIR`: print the results of the cache
// library's checks for a person (or as JSON), and turn them into exit codes.
#include <filesystem>

namespace sluice::runtime {

// 0 when the cache is sound; 1 with every fault listed (shard file, sample) otherwise.
int run_cache_verify(const std::filesystem::path& dir);

int run_cache_inspect(const std::filesystem::path& dir, bool as_json);

}  // namespace sluice::runtime
