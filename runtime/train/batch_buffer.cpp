#include "runtime/train/batch_buffer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace sluice::runtime {
namespace {

constexpr size_t alignment = 64;
size_t align(size_t offset) { return (offset + alignment - 1) / alignment * alignment; }

void check_header_fits(size_t size) {
  if (size < sizeof(BatchHeader)) {
    throw DataError("received " + std::to_string(size) + " bytes, less than a batch header");
  }
}

// The layout `header` describes, once it is known to be a batch of this version that `size`
// bytes hold. `end_of_stream_allowed`: a header-only end-of-stream message passes too.
BatchLayout checked_layout(const BatchHeader& header, size_t size, bool end_of_stream_allowed) {
  if (header.magic != BatchHeader::expected_magic || header.version != BatchHeader::current_version) {
    throw DataError("received bytes that are not a sluice batch (bad magic or version): "
                    "data and model ranks run different sluice builds?");
  }
  const BatchLayout layout = BatchLayout::of(header.batch_size, header.max_tokens, header.max_frames, header.n_mels);
  if (!(end_of_stream_allowed && header.end_of_stream) && size < layout.total) {
    throw DataError("batch of step " + std::to_string(header.step) + " is " + std::to_string(size) +
                    " bytes, its header says " + std::to_string(layout.total));
  }
  return layout;
}

}  // namespace

BatchLayout BatchLayout::of(int32_t batch_size, int32_t max_tokens, int32_t max_frames, int32_t n_mels) {
  const auto b = static_cast<size_t>(batch_size);
  BatchLayout layout;
  layout.indices = align(sizeof(BatchHeader));
  layout.token_lens = align(layout.indices + b * sizeof(int64_t));
  layout.mel_lens = align(layout.token_lens + b * sizeof(int32_t));
  layout.tokens = align(layout.mel_lens + b * sizeof(int32_t));
  layout.mels = align(layout.tokens + b * static_cast<size_t>(max_tokens) * sizeof(int32_t));
  layout.total = layout.mels + b * static_cast<size_t>(max_frames) * static_cast<size_t>(n_mels) * sizeof(float);
  return layout;
}

size_t batch_bytes(const BucketShape& bucket, int32_t n_mels) {
  if (n_mels < 1) throw Error(ErrorKind::internal, "n_mels " + std::to_string(n_mels) + " must be at least 1");
  return BatchLayout::of(bucket, n_mels).total;
}

size_t max_batch_bytes(const BatchPlan& plan, int32_t n_mels) {
  size_t largest = 0;
  for (const BucketShape& bucket : plan.buckets()) largest = std::max(largest, batch_bytes(bucket, n_mels));
  return largest;
}

BatchPointers BatchPointers::of(const void* bytes, size_t size) {
  check_header_fits(size);
  const auto* header = static_cast<const BatchHeader*>(bytes);
  checked_layout(*header, size, true);
  return at(bytes, *header);
}

int64_t BatchPointers::real_frames() const {
  int64_t frames = 0;
  for (int32_t i = 0; i < header->batch_size; ++i) frames += mel_lens[i];
  return frames;
}

BatchPointers BatchPointers::at(const void* bytes, const BatchHeader& header) {
  const auto* base = static_cast<const std::byte*>(bytes);
  const BatchLayout layout = BatchLayout::of(header.batch_size, header.max_tokens, header.max_frames, header.n_mels);
  return {reinterpret_cast<const BatchHeader*>(base),
          reinterpret_cast<const int64_t*>(base + layout.indices),
          reinterpret_cast<const int32_t*>(base + layout.token_lens),
          reinterpret_cast<const int32_t*>(base + layout.mel_lens),
          reinterpret_cast<const int32_t*>(base + layout.tokens),
          reinterpret_cast<const float*>(base + layout.mels)};
}

DeviceBatch DeviceBatch::of(const void* device_bytes, size_t size, CopyToHost copy_to_host) {
  DeviceBatch batch;
  check_header_fits(size);
  BatchHeader header;
  copy_to_host(&header, device_bytes, sizeof(header));
  const BatchLayout layout = checked_layout(header, size, false);  // the transports deliver no end of stream
  batch.host_prefix.resize(layout.tokens);
  copy_to_host(batch.host_prefix.data(), device_bytes, layout.tokens);
  batch.host = BatchPointers::at(batch.host_prefix.data(), header);
  batch.host.tokens = nullptr;  // not copied back
  batch.host.mels = nullptr;
  batch.device = BatchPointers::at(device_bytes, header);
  return batch;
}

void collate(const std::vector<cache::Sample>& samples, const BucketShape& shape, int32_t n_mels,
             int64_t epoch, int64_t step, int32_t bucket, BatchBytes& out) {
  const BatchLayout layout = BatchLayout::of(shape, n_mels);
  out.assign(layout.total, std::byte{0});  // zero padding everywhere
  BatchHeader header;
  header.epoch = epoch;
  header.step = step;
  header.bucket = bucket;
  header.batch_size = shape.batch_size;
  header.max_tokens = shape.max_tokens;
  header.max_frames = shape.max_frames;
  header.n_mels = n_mels;
  std::memcpy(out.data(), &header, sizeof(header));
  if (static_cast<int32_t>(samples.size()) != shape.batch_size) {
    throw Error(ErrorKind::internal, "collate: " + std::to_string(samples.size()) +
                                         " samples for a batch of " + std::to_string(shape.batch_size));
  }
  auto* base = out.data();
  auto* indices = reinterpret_cast<int64_t*>(base + layout.indices);
  auto* token_lens = reinterpret_cast<int32_t*>(base + layout.token_lens);
  auto* mel_lens = reinterpret_cast<int32_t*>(base + layout.mel_lens);
  auto* tokens = reinterpret_cast<int32_t*>(base + layout.tokens);
  auto* mels = reinterpret_cast<float*>(base + layout.mels);
  for (size_t i = 0; i < samples.size(); ++i) {
    const cache::Sample& sample = samples[i];
    const auto n_tokens = static_cast<int32_t>(sample.tokens.size());
    if (sample.n_frames > shape.max_frames || n_tokens > shape.max_tokens || sample.n_mels != n_mels) {
      throw Error(ErrorKind::internal, "sample " + sample.id + " (" + std::to_string(sample.n_frames) +
                                           " frames, " + std::to_string(n_tokens) +
                                           " tokens) does not fit its bucket's padded shape");
    }
    indices[i] = sample.index;
    token_lens[i] = n_tokens;
    mel_lens[i] = sample.n_frames;
    std::copy(sample.tokens.begin(), sample.tokens.end(), tokens + i * static_cast<size_t>(shape.max_tokens));
    std::copy(sample.mel.begin(), sample.mel.end(),
              mels + i * static_cast<size_t>(shape.max_frames) * static_cast<size_t>(n_mels));
  }
}

}  // namespace sluice::runtime
