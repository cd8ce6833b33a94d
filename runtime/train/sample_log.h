#pragma once
// debug.log_samples: what a model rank trained on, batch by batch, in RUN_DIR/samples/rank-N.tsv.
// One line per trained batch: "global_step <TAB> epoch <TAB> step <TAB> index,index,..." (cache
// indices, in batch order). The file is appended to, so a resumed run continues it, and each line
// is flushed when written, so a stopped run keeps every batch it trained. Tests use it to count
// every sample of an epoch across an elastic resume; it costs one write per step, so it is off by
// default.
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "runtime/train/batch_buffer.h"

namespace sluice::runtime {

class SampleLog {
 public:
  // Does nothing unless `enabled`.
  SampleLog(const std::filesystem::path& run_dir, int rank, bool enabled);
  // After `batch` was trained as `global_step`.
  void trained(const BatchPointers& batch, int64_t global_step);

 private:
  std::ofstream out_;
};

}  // namespace sluice::runtime
