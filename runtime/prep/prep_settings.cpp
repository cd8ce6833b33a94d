#include "runtime/prep/prep_settings.h"

#include "common/error.h"
#include "dataset/phonemizer.h"
#include "runtime/settings.h"

namespace sluice::runtime {

PrepSettings PrepSettings::read(const config::Config& config) {
  PrepSettings settings;
  settings.cache_dir = config.string("cache.dir");
  settings.corpus_path = config.string("corpus.path");
  settings.timeout_s = config.number("runtime.timeout_s");
  settings.progress_interval_s = config.number("prep.progress_interval_s");
  settings.overwrite = config.boolean("prep.overwrite");
  settings.shard_size = config.integer("cache.shard_size");
  settings.max_reject_fraction = config.number("prep.max_reject_fraction");
  settings.threads = config.integer("prep.threads");

  BuildSettings& build = settings.build;
  build.mel = mel_config(config);
  build.text = text_config(config);
  build.tokenizer = config.string("text.tokenizer");
  build.min_seconds = config.number("prep.min_seconds");
  build.max_seconds = config.number("prep.max_seconds");
  build.max_tokens = config.integer("prep.max_tokens");
  build.max_tokens_per_second = config.number("prep.max_tokens_per_second");
  build.cache_dir = settings.cache_dir;
  build.writer.chunk_frames = static_cast<int>(config.integer("cache.chunk_frames"));
  build.writer.gzip_level = static_cast<int>(config.integer("cache.gzip_level"));
  build.writer.float16_mels = config.string("cache.mel_dtype") == "float16";
  if (build.writer.float16_mels && build.writer.gzip_level > 0) {
    // Deflated chunks go through HDF5's pipeline, whose float16 -> float32 conversion reads at
    // about 1% of the raw-chunk path's rate (docs/cache-format.md, "Half-size mels").
    throw ConfigError("cache.mel_dtype: float16 with cache.gzip_level " + std::to_string(build.writer.gzip_level) +
                      " would read about 100x slower (HDF5's float16 conversion): set cache.gzip_level: 0, or "
                      "cache.mel_dtype: float32");
  }
  if (build.min_seconds >= build.max_seconds) {
    throw ConfigError("prep.min_seconds (" + std::to_string(build.min_seconds) +
                      ") must be below prep.max_seconds (" + std::to_string(build.max_seconds) + ")");
  }

  settings.output = output_settings(config);
  if (build.tokenizer == "phonemes") {
    // Phoneme strings change with espeak-ng's version and data: a new espeak is a new cache.
    settings.output["text"]["phonemizer"] = dataset::Phonemizer().engine_version();
  }
  return settings;
}

}  // namespace sluice::runtime
