// IEEE binary16 (fp16) and bfloat16 stored as uint16_t, with conversions to and from float that
// round to nearest even (what CUDA's __float2half_rn and __float2bfloat16_rn do). Inline: the
// kernels (kernels/bucket_pack) call them per element. Used by the CPU
// reference of checks and by MPI's user-defined 16-bit reductions (MPI has no 16-bit floats).
#pragma once

#include <cstdint>
#include <cstring>

namespace dtune {
namespace float16_detail {
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace float16_detail

inline float bfloat16_to_float(uint16_t b) {
  return float16_detail::float_of(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  uint32_t u = float16_detail::bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: value = man × 2^-24.
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return float16_detail::float_of(sign | 0x7f800000u | (man << 13));
  return float16_detail::float_of(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float16_detail::bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (>= 65520)
  if (abs < 0x38800000u) {                        // below the smallest normal: subnormal
    // value / 2^-24, rounded to nearest even.
    const float scaled = float16_detail::float_of(abs) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint16_t>(m);
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits.
  uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace dtune
