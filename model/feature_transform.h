#pragma once
// Per-batch work on a padded mel batch before the model sees it: normalisation per mel bin with
// the cache's statistics, and SpecAugment-style time and frequency masks. It runs where the batch
// is: on a data rank's GPU between the upload and the send, or on the host in a CPU data rank's
// reader threads, so the model ranks never spend a step on it. No torch in this header.
//
// Masks are a pure function of (seed, global step, sample index), drawn on the host, so a batch
// gets the same masks on CPU and GPU, on every rerun and after --resume. Padding stays zero.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::model {

// SpecAugment-style masking (Park et al. 2019): per sample, `time_masks` spans of 0..max_time_frames
// frames inside its valid length and `freq_masks` spans of 0..max_freq_bins mel bins are set to
// zero (after normalisation zero is the corpus mean). It masks the batch's mels as a whole: for a
// model that reads its targets from the same mels (the built-in Transformer TTS teacher-forces
// on them) the masked frames are targets too, so it is off by default.
struct MelMasking {
  int time_masks = 0;
  int max_time_frames = 0;
  int freq_masks = 0;
  int max_freq_bins = 0;
  bool active() const { return (time_masks > 0 && max_time_frames > 0) || (freq_masks > 0 && max_freq_bins > 0); }
};

struct FeatureTransformSettings {
  // Per mel bin; both empty = no normalisation. x -> (x - mean) / max(stddev, 1e-4).
  std::vector<float> mean, stddev;
  MelMasking masking;
  uint64_t seed = 0;
};

// [start, end) spans of one sample's masks.
struct MaskSpans {
  std::vector<std::pair<int32_t, int32_t>> time, freq;
};

// The masks of one sample with `frames` valid frames: a pure function of its arguments.
MaskSpans mask_spans(const MelMasking& masking, uint64_t seed, int64_t global_step, int64_t sample_index,
                     int32_t frames, int32_t n_mels);

// One batch's mels (float32 [batch_size, max_frames, n_mels], row-major, on the transform's
// device) and, on the host, the valid lengths and the samples' cache indices.
struct MelBatchRef {
  float* mels = nullptr;
  const int32_t* mel_lens = nullptr;
  const int64_t* sample_indices = nullptr;
  int32_t batch_size = 0;
  int32_t max_frames = 0;
  int32_t n_mels = 0;
};

class FeatureTransform {
 public:
  // device: "cpu" or "cuda:N". Throws ConfigError for statistics that do not match n_mels later
  // (checked per batch) or a device this libtorch cannot use.
  FeatureTransform(FeatureTransformSettings settings, const std::string& device);
  ~FeatureTransform();
  FeatureTransform(const FeatureTransform&) = delete;
  FeatureTransform& operator=(const FeatureTransform&) = delete;

  // Whether apply() changes anything (normalisation or masking configured).
  bool active() const;
  bool normalizes() const;
  // In place. `augment` false (validation) normalises only. On CUDA it returns once the work is
  // complete, so the caller may hand the memory to a transport. Thread-safe on CPU (reader
  // threads share one transform).
  void apply(const MelBatchRef& batch, int64_t global_step, bool augment) const;
  // One line for the log: "normalise 80 bins (corpus statistics), 2 time masks <= 20 frames, ...".
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::model
