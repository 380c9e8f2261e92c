#pragma once
// The initial weights' normal values, the same bits on the host and on the
// GPU: a counter-based draw (value i of a seed's stream needs no other) with
// a logarithm and a cosine of our own, built from additions,
// multiplications, divisions and square roots only, each rounded once (IEEE
// round to nearest on both sides; on the GPU through the _rn intrinsics, so
// nvcc cannot fuse them into FMAs, and on the host in a file compiled
// without contraction: engine/CMakeLists.txt). The C library's log and cos
// differ between the host and CUDA by an ulp now and then, which after
// rounding to float would move a few values of a 7B model; these do not.
// Accurate to a few ulps of a double, far below the float the values end in.

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif

namespace tandem::portable {

#if defined(__CUDA_ARCH__)
TANDEM_HD double add(double a, double b) { return __dadd_rn(a, b); }
TANDEM_HD double sub(double a, double b) { return __dsub_rn(a, b); }
TANDEM_HD double mul(double a, double b) { return __dmul_rn(a, b); }
TANDEM_HD double div(double a, double b) { return __ddiv_rn(a, b); }
TANDEM_HD double squareRoot(double a) { return __dsqrt_rn(a); }
#else
TANDEM_HD double add(double a, double b) { return a + b; }
TANDEM_HD double sub(double a, double b) { return a - b; }
TANDEM_HD double mul(double a, double b) { return a * b; }
TANDEM_HD double div(double a, double b) { return a / b; }
TANDEM_HD double squareRoot(double a) { return __builtin_sqrt(a); }
#endif

// splitmix64: the value of draw `k` (0-based) of the stream seeded `seed`,
// as SplitMix64::next() gives it on its (k + 1)-th call.
TANDEM_HD uint64_t splitmixDraw(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1): the draw's top 53 bits.
TANDEM_HD double uniformOf(uint64_t bits) { return double(bits >> 11) * (1.0 / 9007199254740992.0); }

// Natural logarithm of a normal positive double: x = m 2^e with m in
// (sqrt(1/2), sqrt(2)], log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <
// 0.172, by its series to s^25.
TANDEM_HD double logOf(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  int e = int((bits >> 52) & 0x7FF) - 1023;
  bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;  // m in [1, 2)
  double m;
  std::memcpy(&m, &bits, 8);
  if (m > 1.4142135623730951) {
    m = mul(m, 0.5);  // exact
    e += 1;
  }
  const double s = div(sub(m, 1.0), add(m, 1.0));
  const double z = mul(s, s);
  // 1 + z/3 + z^2/5 + ... + z^12/25, by Horner.
  double p = div(1.0, 25.0);
  for (int k = 11; k >= 0; --k) p = add(mul(p, z), div(1.0, double(2 * k + 1)));
  const double log_m = mul(mul(2.0, s), p);
  // e ln 2 in two parts (the high part has zeros at its end, so e times it
  // is exact).
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  return add(mul(double(e), kLn2Hi), add(mul(double(e), kLn2Lo), log_m));
}

// sin and cos of phi in [0, pi/4], by their series to phi^21 and phi^20.
TANDEM_HD double sinSeries(double phi) {
  const double z = mul(phi, phi);
  double p = 1.0;  // 1 - z/(2 3) (1 - z/(4 5) (1 - ...)) from the inside out
  for (int k = 10; k >= 1; --k) p = sub(1.0, div(mul(z, p), double((2 * k) * (2 * k + 1))));
  return mul(phi, p);
}
TANDEM_HD double cosSeries(double phi) {
  const double z = mul(phi, phi);
  double p = 1.0;
  for (int k = 10; k >= 1; --k) p = sub(1.0, div(mul(z, p), double((2 * k - 1) * (2 * k))));
  return p;
}

// cos(2 pi u) for u in [0, 1): the quadrant from 4u (exact), the angle
// within it folded into [0, pi/4].
TANDEM_HD double cos2Pi(double u) {
  const double t = mul(u, 4.0);
  const int q = int(t);
  const double r = sub(t, double(q));  // [0, 1), exact
  const bool folded = r > 0.5;
  const double phi = mul(1.5707963267948966, folded ? sub(1.0, r) : r);
  // cos and sin of (pi/2) r.
  const double c = folded ? sinSeries(phi) : cosSeries(phi);
  const double s = folded ? cosSeries(phi) : sinSeries(phi);
  switch (q & 3) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}

// Standard normal number i of the stream seeded `seed` (Box-Muller's cosine
// half, from draws 2i and 2i + 1), as SplitMix64::normal() draws it.
TANDEM_HD double normalAt(uint64_t seed, uint64_t i) {
  const double u1 = sub(1.0, uniformOf(splitmixDraw(seed, 2 * i)));  // (0, 1]
  const double u2 = uniformOf(splitmixDraw(seed, 2 * i + 1));
  return mul(squareRoot(mul(-2.0, logOf(u1))), cos2Pi(u2));
}

// The initial value: stddev times the normal, rounded to float.
TANDEM_HD float scaledNormalAt(uint64_t seed, uint64_t i, double stddev) {
  return float(mul(stddev, normalAt(seed, i)));
}

}  // namespace tandem::portable
