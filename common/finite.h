#pragma once
// The finite-value check on every decoded clip and every mel (dataset/audio.cpp, the prep
// workers, cache::ShardWriter): each is on a hot path, and almost every clip passes.
#include <cmath>
#include <cstdint>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice {

// The index of the first NaN or infinity among values[0, n), or n when every value is finite.
// The common case is one branch-free pass, 4 floats at a time with SSE2 (part of x86-64; the
// project builds at -O2, where GCC leaves a std::isfinite loop scalar): a value is special when
// its exponent bits are all ones. Only when that pass finds one does the search run.
inline int64_t first_non_finite(const float* values, int64_t n) {
  int64_t i = 0;
  uint32_t special = 0;
#if defined(__SSE2__)
  const __m128i exponent = _mm_set1_epi32(0x7f800000);
  __m128i any = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    const __m128i bits = _mm_castps_si128(_mm_loadu_ps(values + i));
    any = _mm_or_si128(any, _mm_cmpeq_epi32(_mm_and_si128(bits, exponent), exponent));
  }
  special = static_cast<uint32_t>(_mm_movemask_epi8(any));
#endif
  for (; i < n; ++i) special |= std::isfinite(values[i]) ? 0u : 1u;
  if (special == 0) return n;
  for (i = 0; i < n && std::isfinite(values[i]); ++i) {
  }
  return i;
}

}  // namespace sluice
