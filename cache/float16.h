#pragma once
// IEEE 754 binary16 ("half", numpy's float16) <-> float, for caches that store mels at half the
// bytes (cache.mel_dtype: float16, docs/cache-format.md). Written out rather than left to HDF5's
// soft conversion: the writer rounds once, to nearest with ties to even, and knows the result.
// Out of half's range: |x| >= 65520 becomes +-inf, NaN stays NaN; below 2^-24 rounds to +-0.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::cache {

inline uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return static_cast<uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {  // below half's smallest normal, 2^-14: a subnormal of 2^-24 steps
    if (magnitude <= 0x33000000u) return sign;  // at most 2^-25: to zero (2^-25 itself ties to even 0)
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (magnitude - 0x38000000u) >> 13;  // exponent rebiased 127 -> 15, 10 mantissa bits
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | half);
}

inline float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    const float subnormal = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // x 2^-24, exact
    std::memcpy(&bits, &subnormal, sizeof bits);
    bits |= sign;
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// A value as float16 stores it.
inline float round_to_half(float value) { return half_to_float(float_to_half(value)); }

// half_to_float over n values: the CPU's F16C conversion (8 at a time) where it has one (x86
// since 2012), else the function above; the same results either way (widening is exact).
void halves_to_floats(const uint16_t* halves, float* out, size_t n);
// float_to_half over n values, likewise (F16C rounds to nearest even too).
void floats_to_halves(const float* values, uint16_t* out, size_t n);

}  // namespace sluice::cache
