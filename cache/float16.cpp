#include "cache/float16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sluice::cache {
namespace {

void halves_to_floats_portable(const uint16_t* halves, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(halves[i]);
}

#if defined(__x86_64__) || defined(__i386__)
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
  static const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  if (f16c) {
    halves_to_floats_f16c(halves, out, n);
    return;
  }
#endif
  halves_to_floats_portable(halves, out, n);
}

}  // namespace sluice::cache
