#include "engine/numerics/fp8.h"

#include <array>
#include <cmath>
#include <cstring>

namespace tandem {

namespace {

struct Layout {
  int mantissa_bits;
  int bias;
  uint32_t largest;  // the code of the largest finite value
  uint8_t nan;       // the NaN CUDA writes (sign bit apart)
};

constexpr Layout layoutOf(Fp8Format f) {
  // E4M3: exponent field 15 holds finite values but S.1111.111 (NaN), so the
  // largest is 1.110b x 2^8 = 448 (0x7E). E5M2: field 31 is infinities and
  // NaNs, so the largest is 1.11b x 2^15 = 57344 (0x7B).
  return f == Fp8Format::E4M3 ? Layout{3, 7, 0x7E, 0x7F} : Layout{2, 15, 0x7B, 0x7F};
}

// The value of every code, from its fields.
float decode(uint8_t bits, Fp8Format f) {
  const Layout l = layoutOf(f);
  const bool negative = bits & 0x80;
  const int field = (bits & 0x7F) >> l.mantissa_bits;
  const int mantissa = bits & ((1 << l.mantissa_bits) - 1);
  float v = 0;
  if (f == Fp8Format::E4M3 && field == 15 && mantissa == 7) {
    v = std::nanf("");
  } else if (f == Fp8Format::E5M2 && field == 31) {
    v = mantissa == 0 ? INFINITY : std::nanf("");
  } else if (field == 0) {
    v = std::ldexp(float(mantissa), 1 - l.bias - l.mantissa_bits);
  } else {
    v = std::ldexp(float((1 << l.mantissa_bits) | mantissa), field - l.bias - l.mantissa_bits);
  }
  return negative ? -v : v;
}

using Table = std::array<float, 256>;

Table tableOf(Fp8Format f) {
  Table t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = decode(uint8_t(c), f);
  return t;
}

}  // namespace

float fp8LargestFinite(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }

uint8_t fp8FromFloat(float x, Fp8Format f) {
  const Layout l = layoutOf(f);
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return uint8_t(sign | l.nan);
  const int shift = 23 - l.mantissa_bits;  // float mantissa bits dropped
  const int min_exponent = 1 - l.bias;     // of the smallest normal value
  uint32_t code = 0;
  if (int(a >> 23) - 127 < min_exponent) {
    // Subnormal (or rounding up into the smallest normal, whose code the
    // count of subnormal steps reaches): |x| in steps of the smallest
    // subnormal, exact in a float (a power-of-two scaling of a value below
    // 2^min_exponent), rounded to the nearest, ties to even.
    float abs_x;
    std::memcpy(&abs_x, &a, 4);
    code = uint32_t(std::nearbyint(std::ldexp(abs_x, l.mantissa_bits - min_exponent)));
  } else {
    // Normal: the exponent rebiased and the mantissa rounded to the nearest,
    // ties to even, in one integer addition on the float's bits (a carry
    // out of the mantissa moves into the exponent, as it should).
    const uint32_t rounded = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
    code = (rounded >> shift) - (uint32_t(127 - l.bias) << l.mantissa_bits);
  }
  // Infinity and whatever rounds past the largest finite value saturate.
  if (code > l.largest) code = l.largest;
  return uint8_t(sign | code);
}

float fp8ToFloat(uint8_t bits, Fp8Format f) {
  static const Table e4m3 = tableOf(Fp8Format::E4M3), e5m2 = tableOf(Fp8Format::E5M2);
  return (f == Fp8Format::E4M3 ? e4m3 : e5m2)[bits];
}

float roundToFp8(float x, Fp8Format f) { return fp8ToFloat(fp8FromFloat(x, f), f); }

float fp8Scale(float amax, Fp8Format f, float previous_scale, int margin) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous_scale;
  const float scale = fp8LargestFinite(f) / amax / std::ldexp(1.0f, margin);
  return std::isfinite(scale) ? scale : previous_scale;
}

}  // namespace tandem
