#pragma once
// The one configuration schema of sluice: every setting of every command, with its type,
// default and meaning. docs/configuration.md is generated from it (`sluice config reference`).
#include "common/config.h"
#include "dataset/corpus.h"
#include "dataset/mel.h"
#include "dataset/text_normalizer.h"

namespace sluice::runtime {

const config::Schema& settings_schema();

// Typed views of config sections, for the libraries that take plain structs.
dataset::MelConfig mel_config(const config::Config& config);
dataset::TextConfig text_config(const config::Config& config);
dataset::CorpusOptions corpus_options(const config::Config& config);
// A comma-separated setting ("data,model,model"): items trimmed, empty ones dropped.
std::vector<std::string> split_list(const std::string& text);

// The settings that change what `sluice prep` writes, as JSON: these go into the cache
// fingerprint and the manifest. Settings that only change how fast it runs (threads, progress,
// timeouts) or where (paths) are left out, so changing them never invalidates a cache.
nlohmann::json output_settings(const config::Config& config);

}  // namespace sluice::runtime
