// FP8 casts of the CPU reference (engine/numerics/fp8.h): exact values,
// rounding, saturation, and where the CUDA toolkit's headers are at hand,
// bit for bit against CUDA's own host conversion over a sweep of floats.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/numerics/fp8.h"

#ifdef TANDEM_FP8_ORACLE
#include <cuda_fp8.h>
#endif

using namespace tandem;

namespace {

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("FP8 formats: the largest values, the smallest subnormals, and every code decodes to itself",
          "[fp8][numerics]") {
  CHECK(fp8ToFloat(0x7E, Fp8Format::E4M3) == 448.0f);  // S.1111.110
  CHECK(std::isnan(fp8ToFloat(0x7F, Fp8Format::E4M3)));
  CHECK(fp8ToFloat(0x01, Fp8Format::E4M3) == std::ldexp(1.0f, -9));
  CHECK(fp8ToFloat(0x08, Fp8Format::E4M3) == std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(fp8ToFloat(0x7B, Fp8Format::E5M2) == 57344.0f);  // S.11110.11
  CHECK(std::isinf(fp8ToFloat(0x7C, Fp8Format::E5M2)));
  CHECK(fp8ToFloat(0x01, Fp8Format::E5M2) == std::ldexp(1.0f, -16));
  CHECK(fp8ToFloat(0xC0, Fp8Format::E5M2) == -2.0f);
  CHECK(fp8LargestFinite(Fp8Format::E4M3) == 448.0f);
  CHECK(fp8LargestFinite(Fp8Format::E5M2) == 57344.0f);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int c = 0; c < 256; ++c) {
      const float v = fp8ToFloat(uint8_t(c), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      INFO("code " << c);
      // -0 and +0 are two codes of one value.
      if (v == 0.0f) CHECK((c & 0x7F) == 0);
      else CHECK(fp8FromFloat(v, f) == uint8_t(c));
    }
}

TEST_CASE("FP8 casts round to the nearest value, ties to even, and saturate at the largest finite value",
          "[fp8][numerics]") {
  // E4M3 around 1: steps of 1/8. 1 + 1/16 is a tie between 1 (mantissa 000,
  // even) and 1.125: it goes to 1; 1.125 + 1/16 goes to 1.25 (mantissa 010).
  CHECK(roundToFp8(1.0625f, Fp8Format::E4M3) == 1.0f);
  CHECK(roundToFp8(1.1875f, Fp8Format::E4M3) == 1.25f);
  CHECK(roundToFp8(1.07f, Fp8Format::E4M3) == 1.125f);
  // A rounding that carries into the next exponent: 1.96875 -> 2.
  CHECK(roundToFp8(1.96875f, Fp8Format::E4M3) == 2.0f);
  // E5M2 around 1: steps of 1/4.
  CHECK(roundToFp8(1.125f, Fp8Format::E5M2) == 1.0f);
  CHECK(roundToFp8(1.375f, Fp8Format::E5M2) == 1.5f);
  // Subnormals: half the smallest E4M3 subnormal is a tie with 0 (even).
  CHECK(roundToFp8(std::ldexp(1.0f, -10), Fp8Format::E4M3) == 0.0f);
  CHECK(roundToFp8(std::ldexp(3.0f, -11), Fp8Format::E4M3) == std::ldexp(1.0f, -9));
  CHECK(roundToFp8(std::ldexp(1.5f, -9), Fp8Format::E4M3) == std::ldexp(2.0f, -9));  // tie to even (2)
  // Saturation, both signs, infinities included; NaN stays NaN.
  CHECK(roundToFp8(500.0f, Fp8Format::E4M3) == 448.0f);
  CHECK(roundToFp8(-1e30f, Fp8Format::E4M3) == -448.0f);
  CHECK(roundToFp8(INFINITY, Fp8Format::E4M3) == 448.0f);
  CHECK(roundToFp8(-INFINITY, Fp8Format::E5M2) == -57344.0f);
  CHECK(roundToFp8(60000.0f, Fp8Format::E5M2) == 57344.0f);
  CHECK(std::isnan(roundToFp8(std::nanf(""), Fp8Format::E4M3)));
  CHECK(std::isnan(roundToFp8(std::nanf(""), Fp8Format::E5M2)));
  // The sign of zero is kept.
  CHECK(fp8FromFloat(-0.0f, Fp8Format::E4M3) == 0x80);
}

TEST_CASE("FP8 scales: largest finite over amax over 2^margin, the previous one kept where amax says nothing",
          "[fp8][numerics]") {
  CHECK(fp8Scale(2.0f, Fp8Format::E4M3) == 224.0f);
  CHECK(fp8Scale(2.0f, Fp8Format::E4M3, 1.0f, 1) == 112.0f);
  CHECK(fp8Scale(57344.0f, Fp8Format::E5M2) == 1.0f);
  CHECK(fp8Scale(0.0f, Fp8Format::E4M3, 3.5f) == 3.5f);
  CHECK(fp8Scale(INFINITY, Fp8Format::E4M3, 3.5f) == 3.5f);
  CHECK(fp8Scale(std::nanf(""), Fp8Format::E5M2, 2.0f) == 2.0f);
  CHECK(fp8Scale(1e-40f, Fp8Format::E4M3, 2.0f) == 2.0f);  // 448 / 1e-40 overflows a float
  // A tensor scaled by its own amax reaches the largest value and no further.
  const float amax = 3.3f, s = fp8Scale(amax, Fp8Format::E4M3);
  CHECK(roundToFp8(amax * s, Fp8Format::E4M3) == 448.0f);
}

#ifdef TANDEM_FP8_ORACLE
TEST_CASE("FP8 casts give CUDA's bits (__nv_cvt_float_to_fp8, saturating) over a sweep of floats",
          "[fp8][numerics][oracle]") {
  // Every 251st float bit pattern (17 million, all exponents and signs)
  // and every float within 4 ulps of each FP8 value and of each midpoint
  // between neighbours, where the rounding decides.
  int64_t checked = 0, differ = 0;
  auto check = [&](float x) {
    for (auto [ours, theirs] : {std::pair{Fp8Format::E4M3, __NV_E4M3}, std::pair{Fp8Format::E5M2, __NV_E5M2}}) {
      const uint8_t want = uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, theirs));
      const uint8_t got = fp8FromFloat(x, ours);
      ++checked;
      // CUDA's NaN is one code; ours is that code with x's sign.
      const bool both_nan = std::isnan(fp8ToFloat(want, ours)) && std::isnan(fp8ToFloat(got, ours));
      if (got != want && !both_nan) {
        if (++differ <= 5) FAIL_CHECK("x = " << x << " (" << (ours == Fp8Format::E4M3 ? "E4M3" : "E5M2")
                                           << "): ours " << int(got) << ", CUDA's " << int(want));
      }
    }
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) check(bitsToFloat(uint32_t(u)));
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int c = 0; c < 127; ++c) {
      const float lo = fp8ToFloat(uint8_t(c), f), hi = fp8ToFloat(uint8_t(c + 1), f);
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      for (float centre : {lo, (lo + hi) / 2}) {
        float x = centre;
        for (int i = 0; i < 4; ++i) x = std::nextafter(x, -INFINITY);
        for (int i = 0; i < 9; ++i, x = std::nextafter(x, INFINITY)) check(x), check(-x);
      }
    }
  INFO(checked << " casts checked");
  CHECK(differ == 0);
}
#endif
