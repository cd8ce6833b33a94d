#include "runtime/train/batch_assembler.h"

#include <algorithm>

namespace sluice::runtime {

void BatchAssembler::read(const std::vector<int64_t>& indices) { reader_.read_batch(indices, samples_); }

void BatchAssembler::collate(const ScheduledBatch& scheduled, BatchBytes& bytes) const {
  runtime::collate(samples_, scheduled.shape(), reader_.n_mels(), scheduled.at.epoch, scheduled.at.step,
                   scheduled.batch->bucket, bytes);
}

void BatchAssembler::assemble(const ScheduledBatch& scheduled, BatchBytes& bytes) {
  read(scheduled.batch->samples);
  collate(scheduled, bytes);
}

void BatchAssembler::assemble_unplanned(const std::vector<int64_t>& indices, BatchBytes& bytes) {
  read(indices);
  BucketShape shape;
  shape.batch_size = static_cast<int32_t>(samples_.size());
  for (const auto& sample : samples_) {
    shape.max_frames = std::max(shape.max_frames, sample.n_frames);
    shape.max_tokens = std::max(shape.max_tokens, static_cast<int32_t>(sample.tokens.size()));
  }
  runtime::collate(samples_, shape, reader_.n_mels(), -1, -1, -1, bytes);
}

}  // namespace sluice::runtime
