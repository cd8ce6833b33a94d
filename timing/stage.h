#pragma once
// The stages a rank's time is split into. Every span names one; the report groups by them.
// Names are stable: they appear in timeline files, report.json and trace.json.
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::timing {

enum class Stage : uint8_t {
  // Data ranks (train). cache_read and collate run on reader threads; the rest on the main thread.
  cache_read,        // reading a batch's samples from the cache shards
  collate,           // padding samples into the batch layout
  wait_for_reader,   // sender waiting for the reader threads to finish the next batch
  host_to_device,    // copying a collated batch to the data rank's GPU
  gpu_work,          // per-batch GPU work (normalisation, masking)
  credit_wait,       // sender waiting for a free slot (credit) on its model rank
  send,              // moving the batch's bytes to the model rank
  // Model ranks (train).
  batch_wait,          // waiting for the next batch from the data rank
  forward,             // forward pass and loss (batch checks, host-to-device copy included)
  backward,            // backward pass; gradient buckets start reducing during it
  allreduce_exposed,   // waiting for gradient all-reduce after backward (not hidden)
  allreduce_overlapped,// a bucket's all-reduce in flight while backward computes (own lane)
  optimizer,           // clipping and the AdamW update
  sync,                // the per-step stop/loss agreement among model ranks
  validation,          // a validation pass
  checkpoint,          // writing a checkpoint
  gpu_step,            // the step's GPU work, first kernel to last, from CUDA events (own lane "gpu")
  // Prep ranks.
  decode,            // reading and decoding an audio file
  resample,          // resampling to features.sample_rate
  features,          // log-mel features and text tokens
  write,             // appending to the HDF5 shard (the I/O thread)
  count_             // not a stage: the number of stages
};

constexpr int stage_count = static_cast<int>(Stage::count_);

std::string_view to_string(Stage stage);
std::optional<Stage> stage_from_string(std::string_view name);

}  // namespace sluice::timing
