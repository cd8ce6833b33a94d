#include "cache/float16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sluice::cache {
namespace {

void halves_to_floats_portable(const uint16_t* halves, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(halves[i]);
}

void floats_to_halves_portable(const float* values, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_half(values[i]);
}

#if defined(__x86_64__) || defined(__i386__)
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

__attribute__((target("f16c,avx"))) void floats_to_halves_f16c(const float* values, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wide = _mm256_loadu_ps(values + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(wide, _MM_FROUND_TO_NEAREST_INT));
  }
  floats_to_halves_portable(values + i, out + i, n - i);
}

__attribute__((target("f16c,avx"))) void halves_to_floats_f16c(const uint16_t* halves, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(packed));
  }
  halves_to_floats_portable(halves + i, out + i, n - i);
}
#endif

}  // namespace

void halves_to_floats(const uint16_t* halves, float* out, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (has_f16c()) {
    halves_to_floats_f16c(halves, out, n);
    return;
  }
#endif
  halves_to_floats_portable(halves, out, n);
}

void floats_to_halves(const float* values, uint16_t* out, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (has_f16c()) {
    floats_to_halves_f16c(values, out, n);
    return;
  }
#endif
  floats_to_halves_portable(values, out, n);
}

}  // namespace sluice::cache
