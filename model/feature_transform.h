#pragma once
// Per-batch work on a padded mel batch before the model sees it: normalisation per mel bin with
// the cache's statistics, and SpecAugment-style time and frequency masks. It runs where the batch
// is: on a data rank's GPU between the upload and the send, or on the host in a CPU data rank's
// reader threads, so the model ranks never spend a step on it. No torch here: this is
// sluice_model_core, which a Python model rank's process links (docs/architecture.md, "Who loads
// libtorch"). On the host the arithmetic is plain loops; on a CUDA device it is libtorch's,
// handed in by sluice_model (make_feature_transform, device_feature_transform.h). Both give the
// same bits as libtorch's CPU kernels did (x - mean, times 1 / stddev, times the keep factors,
// each rounded once).
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

// What normalisation multiplies by, per mel bin: 1 / max(stddev, 1e-4).
std::vector<float> inverse_stddevs(const std::vector<float>& stddev);

// apply()'s arithmetic on a device other than the host (libtorch's on CUDA, sluice_model). It holds
// the statistics on its device (mean and inverse_stddevs(stddev), made by its maker).
class DeviceMelArithmetic {
 public:
  virtual ~DeviceMelArithmetic() = default;
  // In place on batch.mels (device memory): x -> (x - mean) * inverse_stddev per mel bin when
  // `normalize`, then x * time_keep[sample][frame], then, unless freq_keep is empty,
  // x * freq_keep[sample][bin] (host arrays, batch_size x max_frames and batch_size x n_mels).
  // Returns once the work is complete.
  virtual void apply(const MelBatchRef& batch, bool normalize, const std::vector<float>& time_keep,
                     const std::vector<float>& freq_keep) const = 0;
};

class FeatureTransform {
 public:
  // On the host: device "cpu". Any other device is a ConfigError here; a transform on "cuda:N"
  // comes from make_feature_transform (sluice_model). Statistics that do not match n_mels are a
  // ConfigError later (checked per batch).
  FeatureTransform(FeatureTransformSettings settings, const std::string& device);
  // On `device` ("cuda:N", for describe()), with that device's arithmetic.
  FeatureTransform(FeatureTransformSettings settings, std::string device,
                   std::unique_ptr<DeviceMelArithmetic> arithmetic);
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
  // The arithmetic on the host: plain loops (feature_transform.cpp says why they give torch's bits).
  void apply_on_host(const MelBatchRef& batch, const std::vector<float>& time_keep,
                     const std::vector<float>& freq_keep) const;

  FeatureTransformSettings settings_;
  std::string device_;
  std::vector<float> inverse_stddev_;  // per mel bin; empty without normalisation
  std::unique_ptr<DeviceMelArithmetic> arithmetic_;  // null: on the host
};

}  // namespace sluice::model
