#include "dataset/mel.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"
#include "common/log.h"

namespace sluice::dataset {
namespace {

// FFTW's planner (plan creation and destruction) touches global state; only fftwf_execute* is
// thread-safe. Every plan in the process is made and destroyed under this lock.
std::mutex& fftw_planner_mutex() {
  static std::mutex mutex;
  return mutex;
}

// FFTW's new-array execute requires arrays aligned like the ones the plan was made with; all
// buffers come from this allocator, so they always are.
constexpr size_t kAlignment = 64;

struct FreeDeleter {
  void operator()(float* p) const noexcept { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], FreeDeleter>;

AlignedFloats aligned_floats(size_t count) {
  size_t bytes = count * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, bytes == 0 ? kAlignment : bytes);
  if (memory == nullptr) throw std::bad_alloc();
  return AlignedFloats(static_cast<float*>(memory));
}

// Owns one fftwf_plan; creation and destruction go through the planner lock.
class R2cPlan {
 public:
  explicit R2cPlan(int n_fft) {
    AlignedFloats in = aligned_floats(static_cast<size_t>(n_fft));
    AlignedFloats out = aligned_floats(static_cast<size_t>(n_fft / 2 + 1) * 2);
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    // FFTW_ESTIMATE, not FFTW_MEASURE: MEASURE picks the algorithm by timing, so two processes
    // (two ranks, or a rerun) could pick different ones whose float32 results differ in the last
    // bits, and a cache would depend on which rank wrote a shard. ESTIMATE's choice is a pure
    // function of the size, so features are bit-identical everywhere. MEASURE's transforms were
    // ~1.5x faster; the whole prep pipeline stays far above its throughput goal without them.
    // (Batched plans, fftwf_plan_many_dft_r2c over 4-16 frames, measured slower than one frame
    // at a time.)
    plan_ = fftwf_plan_dft_r2c_1d(n_fft, in.get(), reinterpret_cast<fftwf_complex*>(out.get()),
                                  FFTW_ESTIMATE);
    if (plan_ == nullptr) {
      throw Error(ErrorKind::internal, "FFTW could not plan a real FFT of features.n_fft (" +
                                           std::to_string(n_fft) + ")");
    }
  }
  ~R2cPlan() {
    std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    fftwf_destroy_plan(plan_);
  }
  R2cPlan(const R2cPlan&) = delete;
  R2cPlan& operator=(const R2cPlan&) = delete;

  // Thread-safe (FFTW's new-array execute); in and out must come from aligned_floats.
  void execute(float* in, float* out) const {
    fftwf_execute_dft_r2c(plan_, in, reinterpret_cast<fftwf_complex*>(out));
  }

 private:
  fftwf_plan plan_ = nullptr;
};

// Per-thread buffers that grow to the largest n_fft used on the thread and are then reused, so
// compute() allocates nothing in steady state and stays safe to call from several threads.
struct Scratch {
  AlignedFloats frame;      // one windowed frame, n_fft samples
  AlignedFloats spectrum;   // its half spectrum, n_fft/2 + 1 interleaved complex bins
  AlignedFloats magnitude;  // |bin|^power, n_fft/2 + 1
  int capacity = 0;         // the n_fft the buffers fit

  void reserve(int n_fft) {
    if (n_fft <= capacity) return;
    frame = aligned_floats(static_cast<size_t>(n_fft));
    spectrum = aligned_floats(static_cast<size_t>(n_fft / 2 + 1) * 2);
    magnitude = aligned_floats(static_cast<size_t>(n_fft / 2 + 1));
    capacity = n_fft;
  }
};

// The three inner loops of compute(), 4 floats at a time with SSE (part of x86-64, so always
// present there). The project builds at -O2, where GCC 12 leaves these loops scalar (sqrtf's
// errno path alone blocks it); together they were a third of compute()'s time. multiply and
// squared_magnitude give bit-identical results either way; dot adds in another order than a
// plain loop would, with the same accuracy.

// dst[k] = a[k] * b[k]
void multiply(const float* a, const float* b, float* dst, int n) {
  int k = 0;
#if defined(__SSE2__)
  for (; k + 4 <= n; k += 4) {
    _mm_storeu_ps(dst + k, _mm_mul_ps(_mm_loadu_ps(a + k), _mm_loadu_ps(b + k)));
  }
#endif
  for (; k < n; ++k) dst[k] = a[k] * b[k];
}

// out[k] = re^2 + im^2 of interleaved complex bins[k], or its square root when take_root.
void squared_magnitude(const float* bins, float* out, int n, bool take_root) {
  int k = 0;
#if defined(__SSE2__)
  for (; k + 4 <= n; k += 4) {
    const __m128 a = _mm_loadu_ps(bins + 2 * k);      // re0 im0 re1 im1
    const __m128 b = _mm_loadu_ps(bins + 2 * k + 4);  // re2 im2 re3 im3
    const __m128 a2 = _mm_mul_ps(a, a);
    const __m128 b2 = _mm_mul_ps(b, b);
    const __m128 re2 = _mm_shuffle_ps(a2, b2, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 im2 = _mm_shuffle_ps(a2, b2, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 sum = _mm_add_ps(re2, im2);
    _mm_storeu_ps(out + k, take_root ? _mm_sqrt_ps(sum) : sum);
  }
#endif
  for (; k < n; ++k) {
    const float sum = bins[2 * k] * bins[2 * k] + bins[2 * k + 1] * bins[2 * k + 1];
    out[k] = take_root ? std::sqrt(sum) : sum;
  }
}

// sum of w[j] * x[j], in four lanes that are added at the end.
float dot(const float* w, const float* x, int n) {
  int j = 0;
  float total = 0.0f;
#if defined(__SSE2__)
  __m128 partial = _mm_setzero_ps();
  for (; j + 4 <= n; j += 4) {
    partial = _mm_add_ps(partial, _mm_mul_ps(_mm_loadu_ps(w + j), _mm_loadu_ps(x + j)));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, partial);
  total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; j < n; ++j) total += w[j] * x[j];
  return total;
}

// torchaudio.functional's _hz_to_mel / _mel_to_hz: HTK's formula, or Slaney's (linear below
// 1 kHz, logarithmic above), which librosa and torchaudio share.
constexpr double kSlaneyHzPerMel = 200.0 / 3.0;
constexpr double kSlaneyLogStartHz = 1000.0;

double slaney_log_step() { return std::log(6.4) / 27.0; }

double hz_to_mel(double hz, bool htk) {
  if (htk) return 2595.0 * std::log10(1.0 + hz / 700.0);
  const double log_start_mel = kSlaneyLogStartHz / kSlaneyHzPerMel;
  if (hz < kSlaneyLogStartHz) return hz / kSlaneyHzPerMel;
  return log_start_mel + std::log(hz / kSlaneyLogStartHz) / slaney_log_step();
}

double mel_to_hz(double mel, bool htk) {
  if (htk) return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
  const double log_start_mel = kSlaneyLogStartHz / kSlaneyHzPerMel;
  if (mel < log_start_mel) return mel * kSlaneyHzPerMel;
  return kSlaneyLogStartHz * std::exp(slaney_log_step() * (mel - log_start_mel));
}

template <typename T>
std::string str(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

[[noreturn]] void bad_setting(const std::string& key, const std::string& value,
                              const std::string& problem) {
  throw ConfigError("features." + key + " (" + value + ") " + problem);
}

}  // namespace

void MelConfig::validate() const {
  if (sample_rate <= 0) bad_setting("sample_rate", str(sample_rate), "must be positive");
  if (n_fft < 2) bad_setting("n_fft", str(n_fft), "must be at least 2");
  if (win_length < 1 || win_length > n_fft) {
    bad_setting("win_length", str(win_length), "must be in [1, n_fft] = [1, " + str(n_fft) + "]");
  }
  if (hop_length < 1) bad_setting("hop_length", str(hop_length), "must be positive");
  if (n_mels < 1) bad_setting("n_mels", str(n_mels), "must be positive");
  const double nyquist = sample_rate / 2.0;
  if (!(f_min >= 0.0)) bad_setting("f_min", str(f_min), "must be >= 0");
  if (!(f_max <= nyquist)) {
    bad_setting("f_max", str(f_max), "exceeds sample_rate/2 (" + str(nyquist) + ")");
  }
  if (!(f_min < f_max)) {
    bad_setting("f_min", str(f_min), "must be below features.f_max (" + str(f_max) + ")");
  }
  if (!(power > 0.0) || !std::isfinite(power)) {
    bad_setting("power", str(power), "must be positive (1: magnitude, 2: power)");
  }
  if (mel_scale != "slaney" && mel_scale != "htk") {
    bad_setting("mel_scale", mel_scale, "must be \"slaney\" or \"htk\"");
  }
  if (norm != "slaney" && norm != "none") {
    bad_setting("norm", norm, "must be \"slaney\" or \"none\"");
  }
  if (pad_mode != "reflect" && pad_mode != "constant") {
    bad_setting("pad_mode", pad_mode, "must be \"reflect\" or \"constant\"");
  }
  if (!(log_floor > 0.0) || !std::isfinite(log_floor)) {
    bad_setting("log_floor", str(log_floor), "must be positive (the log of 0 is -inf)");
  }
}

namespace {

// The mel filterbank, sparse: filter m weighs bins [first_bin[m], first_bin[m] + count), its
// weights at weights[offset[m] .. offset[m + 1]).
struct SparseFilterbank {
  std::vector<int> first_bin;
  std::vector<size_t> offset;  // n_mels + 1 entries
  std::vector<float> weights;
  int used_bins_end = 0;  // no filter reaches this bin or above: their magnitudes are skipped
};

// torchaudio.functional.melscale_fbanks, computed in double.
SparseFilterbank melscale_filterbank(const MelConfig& config, int n_bins) {
  const bool htk = config.mel_scale == "htk";
  // torchaudio spaces the bins as linspace(0, sample_rate // 2, n_bins): integer division,
  // which for an odd rate is not quite k * rate / n_fft. Matching it keeps the oracle exact.
  const double top_hz = static_cast<double>(config.sample_rate / 2);
  const double mel_min = hz_to_mel(config.f_min, htk);
  const double mel_max = hz_to_mel(config.f_max, htk);
  std::vector<double> edge_hz(static_cast<size_t>(config.n_mels) + 2);
  for (size_t i = 0; i < edge_hz.size(); ++i) {
    const double mel = mel_min + (mel_max - mel_min) * static_cast<double>(i) /
                                     static_cast<double>(edge_hz.size() - 1);
    edge_hz[i] = mel_to_hz(mel, htk);
  }
  SparseFilterbank bank;
  bank.first_bin.assign(static_cast<size_t>(config.n_mels), 0);
  bank.offset.assign(static_cast<size_t>(config.n_mels) + 1, 0);
  int empty_filters = 0;
  for (int m = 0; m < config.n_mels; ++m) {
    const double lower = edge_hz[static_cast<size_t>(m)];
    const double centre = edge_hz[static_cast<size_t>(m) + 1];
    const double upper = edge_hz[static_cast<size_t>(m) + 2];
    // Slaney normalisation divides by the band width so every filter has about equal area.
    const double scale = config.norm == "slaney" ? 2.0 / (upper - lower) : 1.0;
    int first = -1;
    for (int k = 0; k < n_bins; ++k) {
      const double hz = top_hz * k / (n_bins - 1);
      const double rising = (hz - lower) / (centre - lower);
      const double falling = (upper - hz) / (upper - centre);
      const double weight = std::max(0.0, std::min(rising, falling));
      if (weight > 0.0) {
        if (first < 0) first = k;
        // A triangle is convex: its nonzero bins are contiguous, so zeros only at the ends.
        bank.weights.push_back(static_cast<float>(weight * scale));
        bank.used_bins_end = std::max(bank.used_bins_end, k + 1);
      } else if (first >= 0) {
        break;
      }
    }
    if (first < 0) ++empty_filters;
    bank.first_bin[static_cast<size_t>(m)] = std::max(first, 0);
    bank.offset[static_cast<size_t>(m) + 1] = bank.weights.size();
  }
  if (empty_filters > 0) {
    // torchaudio warns and carries on; so do we. Such channels are constant log(log_floor).
    log::get("dataset")->warn(
        "{} of features.n_mels ({}) mel filters contain no FFT bin: n_mels is too high for "
        "n_fft ({}); those channels will be constant",
        empty_filters, config.n_mels, config.n_fft);
  }
  return bank;
}

}  // namespace

struct MelExtractor::State {
  explicit State(const MelConfig& c) : config(c), plan(c.n_fft) {}

  MelConfig config;
  int n_bins = 0;        // n_fft/2 + 1
  int window_begin = 0;  // the window's nonzero part inside the n_fft frame
  int window_end = 0;
  std::vector<float> window;  // n_fft long, zero outside [window_begin, window_end)
  SparseFilterbank filterbank;
  enum class Power { magnitude, power, other } power_kind = Power::magnitude;
  R2cPlan plan;
};

MelExtractor::MelExtractor(const MelConfig& config) {
  config.validate();
  state_ = std::make_unique<State>(config);
  State& s = *state_;
  s.n_bins = config.n_fft / 2 + 1;

  // torch.hann_window(win_length) is periodic: 0.5 - 0.5 cos(2 pi i / N), N = win_length.
  // torch.stft zero-pads a shorter window to n_fft, centred (left pad (n_fft - win_length) / 2).
  s.window.assign(static_cast<size_t>(config.n_fft), 0.0f);
  s.window_begin = (config.n_fft - config.win_length) / 2;
  s.window_end = s.window_begin + config.win_length;
  const double two_pi = 2.0 * std::acos(-1.0);
  for (int i = 0; i < config.win_length; ++i) {
    s.window[static_cast<size_t>(s.window_begin + i)] =
        static_cast<float>(0.5 - 0.5 * std::cos(two_pi * i / config.win_length));
  }

  s.filterbank = melscale_filterbank(config, s.n_bins);

  if (config.power == 1.0) {
    s.power_kind = State::Power::magnitude;
  } else if (config.power == 2.0) {
    s.power_kind = State::Power::power;
  } else {
    s.power_kind = State::Power::other;
  }
}

MelExtractor::~MelExtractor() = default;
MelExtractor::MelExtractor(MelExtractor&&) noexcept = default;
MelExtractor& MelExtractor::operator=(MelExtractor&&) noexcept = default;

const MelConfig& MelExtractor::config() const { return state_->config; }

int64_t MelExtractor::min_samples() const {
  const MelConfig& c = state_->config;
  if (!c.center) return c.n_fft;
  return c.pad_mode == "reflect" ? c.n_fft / 2 + 1 : 1;
}

int64_t MelExtractor::n_frames(int64_t n_samples) const {
  if (n_samples < min_samples()) return 0;
  const MelConfig& c = state_->config;
  const int64_t padded = c.center ? n_samples + 2 * (c.n_fft / 2) : n_samples;
  return 1 + (padded - c.n_fft) / c.hop_length;
}

std::vector<float> MelExtractor::filterbank() const {
  const State& s = *state_;
  const int n_mels = s.config.n_mels;
  const SparseFilterbank& bank = s.filterbank;
  std::vector<float> dense(static_cast<size_t>(s.n_bins) * n_mels, 0.0f);
  for (int m = 0; m < n_mels; ++m) {
    const auto mel = static_cast<size_t>(m);
    for (size_t j = bank.offset[mel]; j < bank.offset[mel + 1]; ++j) {
      const size_t bin = static_cast<size_t>(bank.first_bin[mel]) + (j - bank.offset[mel]);
      dense[bin * static_cast<size_t>(n_mels) + mel] = bank.weights[j];
    }
  }
  return dense;
}

void MelExtractor::compute(const float* audio, int64_t n_samples, std::vector<float>& out) const {
  const State& s = *state_;
  const MelConfig& c = s.config;
  if (n_samples < min_samples()) {
    throw DataError("log-mel needs at least " + str(min_samples()) + " samples (features.n_fft " +
                    str(c.n_fft) + ", center " + (c.center ? "on" : "off") + ", pad_mode " +
                    c.pad_mode + "), got " + str(n_samples) +
                    "; reject such clips before (prep.min_seconds)");
  }
  const int64_t frames = n_frames(n_samples);
  const int n_fft = c.n_fft;
  const int n_mels = c.n_mels;
  out.resize(static_cast<size_t>(frames * n_mels));

  thread_local Scratch scratch;
  scratch.reserve(n_fft);
  float* const frame = scratch.frame.get();
  float* const spectrum = scratch.spectrum.get();
  float* const magnitude = scratch.magnitude.get();

  const int64_t pad = c.center ? n_fft / 2 : 0;
  const bool reflect = c.pad_mode == "reflect";
  const float* const window = s.window.data();
  const int window_begin = s.window_begin;
  const int window_length = s.window_end - s.window_begin;
  const float floor = static_cast<float>(c.log_floor);
  const float half_power = static_cast<float>(c.power / 2.0);
  const SparseFilterbank& bank = s.filterbank;
  const int bins_end = bank.used_bins_end;

  // Outside the window the frame stays zero; only [window_begin, window_end) is rewritten.
  std::fill(frame, frame + n_fft, 0.0f);
  for (int64_t t = 0; t < frames; ++t) {
    // Frame t covers padded samples [t * hop, t * hop + n_fft); padded sample p is clip sample
    // p - pad. Only the first and last few frames reach into the padding.
    const int64_t first = t * c.hop_length - pad + window_begin;
    if (first >= 0 && first + window_length <= n_samples) {
      multiply(window + window_begin, audio + first, frame + window_begin, window_length);
    } else {
      for (int k = 0; k < window_length; ++k) {
        int64_t i = first + k;
        float sample = 0.0f;
        if (i >= 0 && i < n_samples) {
          sample = audio[i];
        } else if (reflect) {
          // Mirror about the first/last sample without repeating it (torch/numpy "reflect");
          // min_samples() guarantees the image lies inside the clip.
          i = i < 0 ? -i : 2 * (n_samples - 1) - i;
          sample = audio[i];
        }
        frame[window_begin + k] = window[window_begin + k] * sample;
      }
    }
    s.plan.execute(frame, spectrum);

    if (s.power_kind == State::Power::other) {
      squared_magnitude(spectrum, magnitude, bins_end, false);
      for (int k = 0; k < bins_end; ++k) magnitude[k] = std::pow(magnitude[k], half_power);
    } else {
      squared_magnitude(spectrum, magnitude, bins_end, s.power_kind == State::Power::magnitude);
    }

    float* row = out.data() + static_cast<size_t>(t) * n_mels;
    for (int m = 0; m < n_mels; ++m) {
      const auto mel = static_cast<size_t>(m);
      const float energy =
          dot(bank.weights.data() + bank.offset[mel], magnitude + bank.first_bin[mel],
              static_cast<int>(bank.offset[mel + 1] - bank.offset[mel]));
      row[m] = std::log(std::max(energy, floor));
    }
  }
}

}  // namespace sluice::dataset
