#include "cache/mel_statistics.h"

#include <algorithm>
#include <cmath>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"

namespace sluice::cache {

MelSums::MelSums(int64_t n_mels)
    : sum(static_cast<size_t>(n_mels), 0.0), sum_sq(static_cast<size_t>(n_mels), 0.0) {}

void MelSums::add_frames(const float* data, int64_t n_frames) {
  const size_t bins = sum.size();
  for (int64_t f = 0; f < n_frames; ++f) {
    const float* row = data + static_cast<size_t>(f) * bins;
    size_t b = 0;
#if defined(__SSE2__)
    // Two bins per instruction (the project builds at -O2, where GCC leaves this loop scalar).
    // Each bin still gets exactly `sum += double(x); sum_sq += double(x) * double(x)`, frame by
    // frame, so the sums are bit-identical to the scalar loop's (no FMA: SSE2 has none).
    double* const sums = sum.data();
    double* const squares = sum_sq.data();
    for (; b + 4 <= bins; b += 4) {
      const __m128 x = _mm_loadu_ps(row + b);
      const __m128d low = _mm_cvtps_pd(x);
      const __m128d high = _mm_cvtps_pd(_mm_movehl_ps(x, x));
      _mm_storeu_pd(sums + b, _mm_add_pd(_mm_loadu_pd(sums + b), low));
      _mm_storeu_pd(sums + b + 2, _mm_add_pd(_mm_loadu_pd(sums + b + 2), high));
      _mm_storeu_pd(squares + b, _mm_add_pd(_mm_loadu_pd(squares + b), _mm_mul_pd(low, low)));
      _mm_storeu_pd(squares + b + 2, _mm_add_pd(_mm_loadu_pd(squares + b + 2), _mm_mul_pd(high, high)));
    }
#endif
    for (; b < bins; ++b) {
      const double x = row[b];
      sum[b] += x;
      sum_sq[b] += x * x;
    }
  }
  frames += n_frames;
}

void MelSums::add(const MelSums& other) {
  if (other.sum.size() != sum.size() || other.sum_sq.size() != sum_sq.size()) {
    throw CacheError("cannot add mel sums over " + std::to_string(other.sum.size()) +
                     " bins to sums over " + std::to_string(sum.size()) +
                     " bins: the shards were made with different features.n_mels");
  }
  for (size_t b = 0; b < sum.size(); ++b) {
    sum[b] += other.sum[b];
    sum_sq[b] += other.sum_sq[b];
  }
  frames += other.frames;
}

MelStatistics MelSums::statistics() const {
  MelStatistics out;
  out.frames = frames;
  out.mean.assign(sum.size(), 0.0f);
  out.stddev.assign(sum.size(), 0.0f);
  if (frames <= 0) return out;
  const double n = static_cast<double>(frames);
  for (size_t b = 0; b < sum.size(); ++b) {
    const double mean = sum[b] / n;
    // Rounding can make the difference slightly negative for a (near-)constant bin.
    const double variance = std::max(sum_sq[b] / n - mean * mean, 0.0);
    out.mean[b] = static_cast<float>(mean);
    out.stddev[b] = static_cast<float>(std::sqrt(variance));
  }
  return out;
}

}  // namespace sluice::cache
