#pragma once
// Log-mel features as a PyTorch TTS recipe computes them:
//   torch.log(torch.clamp(torchaudio.transforms.MelSpectrogram(...)(x), min=log_floor))
// with window_fn = torch.hann_window (periodic), normalized = False, onesided = True.
// Computed in float32 (FFTW). Accuracy, checked by tests/dataset/test_mel.cpp: within 1e-4 (in
// log units, i.e. relative energy) of torchaudio's result evaluated in float64, in every band
// within 40 dB of its frame's loudest bin; within 1e-3 everywhere else. Far below the frame's
// peak, float32 FFT rounding dominates any float32 implementation: torchaudio's own float32
// output is up to ~4e-4 away from its float64 result there.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::dataset {

// The `features` section of the config. The defaults are the LJSpeech/Tacotron 2 settings.
struct MelConfig {
  int sample_rate = 22050;
  int n_fft = 1024;
  int win_length = 1024;  // <= n_fft; the window sits centred in the n_fft frame, as in torch.stft
  int hop_length = 256;
  double f_min = 0.0;
  double f_max = 8000.0;
  int n_mels = 80;
  double power = 1.0;                // 1: magnitude, 2: power spectrum
  std::string mel_scale = "slaney";  // or "htk"
  std::string norm = "slaney";       // or "none": slaney divides each filter by its band width
  bool center = true;                // pad n_fft/2 on both sides so frame t is centred on t*hop
  std::string pad_mode = "reflect";  // or "constant" (zeros); used when center
  double log_floor = 1e-5;           // mel energies are clamped to this before the log

  // Throws ConfigError naming the key, e.g. "features.f_max (9000) exceeds sample_rate/2 (8000)".
  void validate() const;
};

// Thread-safety: construction and destruction take a process-wide lock, because FFTW's planner
// is not thread-safe. compute() and the other const members mutate nothing shared: scratch
// buffers are thread_local and the plan runs through fftwf_execute_dft_r2c, which FFTW documents
// as thread-safe. So one extractor may serve many threads; one per worker thread is fine too.
class MelExtractor {
 public:
  // Validates the config (ConfigError) and plans the FFT with FFTW_ESTIMATE, whose choice does
  // not depend on timing: every process computes bit-identical features for the same input.
  explicit MelExtractor(const MelConfig& config);
  ~MelExtractor();
  MelExtractor(MelExtractor&&) noexcept;  // leaves the source usable only for destruction
  MelExtractor& operator=(MelExtractor&&) noexcept;
  MelExtractor(const MelExtractor&) = delete;
  MelExtractor& operator=(const MelExtractor&) = delete;

  const MelConfig& config() const;

  // Shortest input compute() accepts, matching where torch.stft refuses: n_fft/2 + 1 samples
  // with center and reflect padding (a reflection needs that much signal), 1 with constant
  // padding, n_fft without center. Callers reject shorter clips (prep.min_seconds is far above).
  int64_t min_samples() const;

  // Frames compute() produces for n_samples (torch.stft's count); 0 below min_samples().
  int64_t n_frames(int64_t n_samples) const;

  // The mel filterbank as a dense [n_fft/2 + 1][n_mels] matrix, the layout of
  // torchaudio.functional.melscale_fbanks (which it equals up to float32 rounding). compute()
  // uses a sparse copy; this one is for tests and for tools that invert mels.
  std::vector<float> filterbank() const;

  // Resizes `out` to n_frames(n_samples) * n_mels floats, time-major [frame][mel], each
  // log(max(mel_energy, log_floor)). Reuses out's capacity, so a caller that keeps one vector
  // per thread allocates nothing per clip in steady state. Throws DataError below min_samples().
  void compute(const float* audio, int64_t n_samples, std::vector<float>& out) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::dataset
