#pragma once
// One padded batch as bytes: the unit a data rank collates and a transport moves to a model rank.
// Depends on the batch plan (a bucket's padded shape), never the other way round.
//
// Layout (every section 64-byte aligned, so the model can wrap each as a tensor in place):
//   BatchHeader | sample indices int64 [B] | token_lens int32 [B] | mel_lens int32 [B] |
//   tokens int32 [B, T] | mels float32 [B, F, n_mels]
// Padding: tokens with id 0 (<pad>), mel frames with 0; token_lens / mel_lens give the valid
// lengths. Shapes are the bucket's static shape, so every batch of a bucket has the same size.
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

#include "cache/cache_reader.h"
#include "runtime/train/batch_plan.h"

namespace sluice::runtime {

// A collated batch's bytes. The memory resource decides where they live: the heap by default,
// page-locked (pinned) host memory on a data rank that uploads to a GPU
// (transport::pinned_memory_resource), so that the copy runs at the bus's full rate.
using BatchBytes = std::pmr::vector<std::byte>;

struct BatchHeader {
  static constexpr uint32_t expected_magic = 0x43424c53;  // "SLBC"
  static constexpr uint32_t current_version = 2;
  uint32_t magic = expected_magic;
  uint32_t version = current_version;
  int64_t epoch = 0;
  int64_t step = 0;
  int32_t bucket = 0;
  int32_t batch_size = 0;
  int32_t max_tokens = 0;
  int32_t max_frames = 0;
  int32_t n_mels = 0;
  int32_t end_of_stream = 0;  // a header-only message: no more batches
  // The data rank got a stop signal (SIGTERM/SIGUSR1) before it sent this batch; set at the send
  // (BatchFeeder), after collation. Its model ranks take it as their own signal in the stop
  // agreement before their next step, so a signal that reached only a data rank still stops the
  // run at one step on every model rank (version 2).
  int32_t data_rank_stop = 0;
};

struct BatchLayout {
  size_t indices = 0, token_lens = 0, mel_lens = 0, tokens = 0, mels = 0;  // byte offsets
  size_t total = 0;

  static BatchLayout of(int32_t batch_size, int32_t max_tokens, int32_t max_frames, int32_t n_mels);
  static BatchLayout of(const BucketShape& shape, int32_t n_mels) {
    return of(shape.batch_size, shape.max_tokens, shape.max_frames, n_mels);
  }
};

// Bytes of one batch of `bucket`'s padded shape with `n_mels` bins (n_mels >= 1).
size_t batch_bytes(const BucketShape& bucket, int32_t n_mels);
// The largest batch of any bucket of `plan`, as the transport sends it. The same in every epoch
// (the shapes are the split's), so receive slots are sized once.
size_t max_batch_bytes(const BatchPlan& plan, int32_t n_mels);

// Pointers into a batch's bytes (which the caller keeps alive). Throws DataError when the bytes
// are not a batch of this version (data and model ranks run different builds) or are shorter
// than the header says: the bytes arrived, but they are not what the plan promised.
struct BatchPointers {
  const BatchHeader* header;
  const int64_t* indices;
  const int32_t* token_lens;
  const int32_t* mel_lens;
  const int32_t* tokens;
  const float* mels;

  static BatchPointers of(const void* bytes, size_t size);
  // The sections of a batch with `header`'s shape laid out from `bytes`, unchecked: `bytes` may
  // be device memory (nothing is read).
  static BatchPointers at(const void* bytes, const BatchHeader& header);
  // The batch's real (unpadded) mel frames: the sum of mel_lens, read on the host.
  int64_t real_frames() const;
};

// A batch that arrived in device memory (GPU transports). The training loop reads the header and
// the lengths on the host; the model reads every section on the device. `copy_to_host` copies
// device bytes to host memory (transport::copy_device_to_host).
struct DeviceBatch {
  std::vector<std::byte> host_prefix;  // header, indices, token_lens, mel_lens (empty: `host` points elsewhere)
  BatchPointers host{};    // header, indices, token_lens, mel_lens on the host; tokens, mels null
  BatchPointers device{};  // every section's device address

  using CopyToHost = void (*)(void* host, const void* device, size_t bytes);
  // Two small copies (the header, then the sections before the tokens). Throws DataError as
  // BatchPointers::of does.
  static DeviceBatch of(const void* device_bytes, size_t size, CopyToHost copy_to_host);
};

// Writes `samples` (the batch's samples in plan order) padded to `shape` into `out`, resized to
// the layout's size (in `out`'s memory resource). Throws Error (internal) when a sample does not
// fit the shape: the plan guarantees it does.
void collate(const std::vector<cache::Sample>& samples, const BucketShape& shape, int32_t n_mels,
             int64_t epoch, int64_t step, int32_t bucket, BatchBytes& out);

}  // namespace sluice::runtime
