#include "engine/numerics/fp8.h"

#include <cmath>

namespace tandem {

namespace {

struct Layout {
  int mantissa_bits;
  int bias;
  int max_exponent_field;  // of the largest finite value
  int max_mantissa;        // of the largest finite value
  uint8_t nan;             // the NaN CUDA writes (sign bit apart)
};

constexpr Layout layoutOf(Fp8Format f) {
  // E4M3: exponent field 15 holds finite values but S.1111.111 (NaN), so the
  // largest is 1.110b x 2^8 = 448. E5M2: field 31 is infinities and NaNs, so
  // the largest is 1.11b x 2^15 = 57344.
  return f == Fp8Format::E4M3 ? Layout{3, 7, 15, 6, 0x7F} : Layout{2, 15, 30, 3, 0x7F};
}

}  // namespace

float fp8LargestFinite(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }

uint8_t fp8FromFloat(float x, Fp8Format f) {
  const Layout l = layoutOf(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return uint8_t(sign | l.nan);
  const uint8_t largest = uint8_t((l.max_exponent_field << l.mantissa_bits) | l.max_mantissa);
  if (std::isinf(x)) return uint8_t(sign | largest);
  // Every step below is exact in a double: x has 24 significant bits and
  // the operations are scalings by powers of two and one rounding to an
  // integer (nearbyint rounds ties to even in the default rounding mode).
  const double a = std::fabs(double(x));
  const int min_exponent = 1 - l.bias;  // of the smallest normal value
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): a's exponent is e - 1
  int exponent = e - 1;
  uint32_t code = 0;
  if (a == 0.0 || exponent < min_exponent) {
    // Subnormal (or rounding up into the smallest normal, whose code the
    // count of subnormal steps reaches naturally).
    const double steps = std::nearbyint(std::ldexp(a, l.mantissa_bits - min_exponent));
    code = uint32_t(steps);
  } else {
    double mantissa = std::nearbyint(std::ldexp(a, l.mantissa_bits - exponent)) - std::ldexp(1.0, l.mantissa_bits);
    if (mantissa == std::ldexp(1.0, l.mantissa_bits)) {  // rounded up to the next power of two
      mantissa = 0;
      ++exponent;
    }
    const int field = exponent + l.bias;
    if (field > l.max_exponent_field || (field == l.max_exponent_field && int(mantissa) > l.max_mantissa))
      return uint8_t(sign | largest);
    code = uint32_t(field << l.mantissa_bits) | uint32_t(mantissa);
  }
  if (code > largest) code = largest;
  return uint8_t(sign | code);
}

float fp8ToFloat(uint8_t bits, Fp8Format f) {
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

float roundToFp8(float x, Fp8Format f) { return fp8ToFloat(fp8FromFloat(x, f), f); }

float fp8Scale(float amax, Fp8Format f, float previous_scale, int margin) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous_scale;
  const float scale = fp8LargestFinite(f) / amax / std::ldexp(1.0f, margin);
  return std::isfinite(scale) ? scale : previous_scale;
}

}  // namespace tandem
