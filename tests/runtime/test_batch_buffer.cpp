#include <cstring>

#include <gtest/gtest.h>

#include "common/error.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/step_tally.h"

namespace sluice::runtime {
namespace {

cache::Sample sample(int64_t index, int32_t frames, int32_t tokens, int32_t n_mels) {
  cache::Sample s;
  s.index = index;
  s.id = "s" + std::to_string(index);
  s.n_frames = frames;
  s.n_mels = n_mels;
  for (int32_t i = 0; i < frames * n_mels; ++i) s.mel.push_back(float(index) + 0.001f * float(i));
  for (int32_t i = 0; i < tokens; ++i) s.tokens.push_back(int32_t(index * 100 + i + 4));
  return s;
}

// Two samples (indices 7 and 9; 10 and 16 frames; 5 and 8 tokens; 3 mels) padded to 2 x 8 x 16,
// epoch 2, step 41, bucket 1.
BucketShape two_sample_batch(BatchBytes& bytes) {
  BucketShape shape;
  shape.batch_size = 2;
  shape.max_tokens = 8;
  shape.max_frames = 16;
  collate({sample(7, 10, 5, 3), sample(9, 16, 8, 3)}, shape, 3, 2, 41, 1, bytes);
  return shape;
}

TEST(BatchBuffer, CollateRoundTripWithZeroPadding) {
  BatchBytes bytes;
  const BucketShape shape = two_sample_batch(bytes);
  EXPECT_EQ(bytes.size(), BatchLayout::of(shape, 3).total);

  const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
  EXPECT_EQ(batch.header->epoch, 2);
  EXPECT_EQ(batch.header->step, 41);
  EXPECT_EQ(batch.header->bucket, 1);
  EXPECT_EQ(batch.indices[0], 7);
  EXPECT_EQ(batch.indices[1], 9);
  EXPECT_EQ(batch.token_lens[0], 5);
  EXPECT_EQ(batch.mel_lens[0], 10);
  EXPECT_EQ(batch.tokens[4], 7 * 100 + 4 + 4);
  EXPECT_EQ(batch.tokens[5], 0);  // padding
  EXPECT_EQ(batch.tokens[8], 9 * 100 + 4);
  EXPECT_FLOAT_EQ(batch.mels[3 * 9 + 2], 7.0f + 0.001f * 29);
  EXPECT_EQ(batch.mels[3 * 10], 0.0f);  // padded frame 10 of sample 0
  EXPECT_FLOAT_EQ(batch.mels[16 * 3], 9.0f);
  // Every section is 64-byte aligned.
  for (const void* p : {static_cast<const void*>(batch.indices), static_cast<const void*>(batch.tokens),
                        static_cast<const void*>(batch.mels)}) {
    EXPECT_EQ((reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(bytes.data())) % 64, 0u);
  }
}

TEST(BatchBuffer, RejectsWhatIsNotABatch) {
  std::vector<std::byte> junk(200, std::byte{7});
  EXPECT_THROW(BatchPointers::of(junk.data(), junk.size()), DataError);
  EXPECT_THROW(BatchPointers::of(junk.data(), 8), DataError);
  BucketShape shape;
  shape.batch_size = 1;
  shape.max_tokens = 8;
  shape.max_frames = 8;
  BatchBytes bytes;
  collate({sample(1, 8, 8, 2)}, shape, 2, 0, 0, 0, bytes);
  EXPECT_THROW(BatchPointers::of(bytes.data(), bytes.size() - 4), DataError);
  EXPECT_THROW(collate({sample(1, 9, 8, 2)}, shape, 2, 0, 0, 0, bytes), Error);
}

// A batch in "device" memory, read back through a host copy function (memcpy here; the GPU
// transports pass cudaMemcpy): host sections from the copy, every section's address in place.
TEST(BatchBuffer, DeviceBatchReadsHeaderAndLengthsThroughTheCopy) {
  BatchBytes bytes;
  const BucketShape shape = two_sample_batch(bytes);
  static size_t copied = 0;
  copied = 0;
  const auto copy = [](void* host, const void* device, size_t size) {
    std::memcpy(host, device, size);
    copied += size;
  };
  const DeviceBatch batch = DeviceBatch::of(bytes.data(), bytes.size(), copy);
  const BatchLayout layout = BatchLayout::of(shape, 3);
  EXPECT_EQ(copied, sizeof(BatchHeader) + layout.tokens);  // never the tokens or the mels
  EXPECT_EQ(batch.host.header->step, 41);
  EXPECT_EQ(batch.host.header->batch_size, 2);
  EXPECT_EQ(batch.host.indices[1], 9);
  EXPECT_EQ(batch.host.mel_lens[0], 10);
  EXPECT_EQ(batch.host.token_lens[1], 8);
  EXPECT_EQ(batch.host.mels, nullptr);
  EXPECT_NE(static_cast<const void*>(batch.host.header), static_cast<const void*>(bytes.data()));
  EXPECT_EQ(reinterpret_cast<const std::byte*>(batch.device.mels), bytes.data() + layout.mels);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(batch.device.tokens), bytes.data() + layout.tokens);
  EXPECT_THROW(DeviceBatch::of(bytes.data(), bytes.size() - 1, copy), DataError);
  bytes[0] = std::byte{0};
  EXPECT_THROW(DeviceBatch::of(bytes.data(), bytes.size(), copy), DataError);
}

TEST(BatchBuffer, MaxBatchBytesCoversTheLargestBucket) {
  std::vector<PlanSample> split;
  for (int64_t i = 0; i < 16; ++i) split.push_back({i, 100, 20});   // F 104, T 24
  for (int64_t i = 16; i < 32; ++i) split.push_back({i, 300, 10});  // F 304, T 16
  BatchPlanConfig config;
  config.bucket_edges = {100};
  config.batch_size = 4;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_EQ(plan.buckets().size(), 2u);
  // Header (64) | indices 4x8 | token_lens 4x4 | mel_lens 4x4 | tokens 4xT x4 | mels 4xFx80 x4,
  // each section starting on a 64-byte boundary (batch_buffer.h).
  const size_t small = 256 + 4 * 24 * 4 + 4 * 104 * 80 * 4;  // tokens end at 640 (aligned)
  // A longer bucket's token length is at least a shorter one's (plan v2: its remainder may spill
  // into it, batch_plan.h): T 24, not its own samples' 16.
  const size_t large = 256 + 4 * 24 * 4 + 4 * 304 * 80 * 4;  // tokens end at 640 (aligned)
  EXPECT_EQ(batch_bytes(plan.buckets()[0], 80), small);
  EXPECT_EQ(batch_bytes(plan.buckets()[1], 80), large);
  EXPECT_EQ(max_batch_bytes(plan, 80), large);
  EXPECT_EQ(max_batch_bytes(plan, 80), max_batch_bytes(BatchPlan::build(split, config, 2, 7), 80));
}

// StepTally (runtime/train/step_tally.h): what both model sides count of a batch and report.
TEST(StepTally, CountsABatchAndReportsTheIntervalThenStartsAnother) {
  BatchBytes bytes;
  two_sample_batch(bytes);
  StepTally tally;
  tally.count(BatchPointers::of(bytes.data(), bytes.size()));
  tally.add_wait(0.5);
  tally.add_compute(1.5);
  const RankStatus status = tally.take_status("model", 3, 10);
  EXPECT_EQ(status.role, "model");
  EXPECT_EQ(status.step, 3);
  EXPECT_EQ(status.end_step, 10);
  EXPECT_DOUBLE_EQ(status.seconds_per_step, 1.5);
  EXPECT_GT(status.samples_per_s, 0);
  EXPECT_DOUBLE_EQ(status.frames_per_s / status.samples_per_s, 13.0);  // 26 real frames, 2 samples
  EXPECT_EQ(tally.samples(), 2);
  EXPECT_EQ(tally.frames(), 26);
  EXPECT_DOUBLE_EQ(tally.wait_s(), 0.5);
  EXPECT_DOUBLE_EQ(tally.compute_s(), 1.5);
  const RankStatus next = tally.take_status("model", 3, 10);  // a new interval: nothing in it yet
  EXPECT_EQ(next.seconds_per_step, 0);
  EXPECT_EQ(next.samples_per_s, 0);
  EXPECT_EQ(tally.samples(), 2);  // the totals stay
}

}  // namespace
}  // namespace sluice::runtime
