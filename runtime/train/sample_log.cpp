#include "runtime/train/sample_log.h"

#include <string>

#include "common/error.h"

namespace sluice::runtime {

namespace fs = std::filesystem;

SampleLog::SampleLog(const fs::path& run_dir, int rank, bool enabled) {
  if (!enabled) return;
  const fs::path dir = run_dir / "samples";
  fs::create_directories(dir);
  const fs::path path = dir / ("rank-" + std::to_string(rank) + ".tsv");
  out_.open(path, std::ios::app);
  if (!out_) throw Error(ErrorKind::config, "debug.log_samples: cannot open " + path.string() + " for appending");
}

void SampleLog::trained(const BatchPointers& batch, int64_t global_step) {
  if (!out_.is_open()) return;
  std::string line = std::to_string(global_step) + '\t' + std::to_string(batch.header->epoch) + '\t' +
                     std::to_string(batch.header->step) + '\t';
  for (int32_t i = 0; i < batch.header->batch_size; ++i) {
    if (i > 0) line += ',';
    line += std::to_string(batch.indices[i]);
  }
  out_ << line << '\n' << std::flush;
}

}  // namespace sluice::runtime
