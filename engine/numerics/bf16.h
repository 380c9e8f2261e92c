#pragma once
// bfloat16 rounding as every executor does it: values kept as float, rounded
// to the nearest bf16 (ties to even) wherever a bf16 job stores a bf16
// tensor. The CPU reference emulates bf16 with it; the GPU executor converts
// host values with it, so both start from the same bits.

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tandem {

inline uint16_t floatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);  // keep it a quiet NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return uint16_t((u + rounding) >> 16);
}

inline float bf16BitsToFloat(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float roundToBf16(float f) { return bf16BitsToFloat(floatToBf16Bits(f)); }

}  // namespace tandem
