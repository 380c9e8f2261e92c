// GELU, tanh approximation (GPT-2): y = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3).
//
// Evaluated through exact identities of the logistic function s(z) = 1/(1 + e^-z):
//   0.5 (1 + tanh u) = s(2u)
//   dy/dx = s + 0.5 x (1 - tanh^2 u) du/dx = s + 2 x s (1 - s) du/dx
// and with e = exp(-|2u|) <= 1 (never overflows):
//   s = 1 / (1 + e) for u >= 0,   s = e / (1 + e) for u < 0,   s (1 - s) = e / (1 + e)^2
// so neither 1 + tanh u nor 1 - s cancels, and one exp replaces a tanh.
//
// double (the finite-difference checks) calls std::exp. float (the executor,
// where GELU runs on 4C values per token) uses the four-lane exp below: the
// library exp cannot be vectorised and was a fifth of a tiny-GPT step. It is
// within 2 ulp of the correctly rounded float exp and flushes results below
// exp(-87) (where float turns subnormal) to zero. Every element, including the
// tail of an array, goes through the same lanes, so a value does not depend on
// its position.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/cpu/kernels.h"

namespace tandem::cpu {
namespace {

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// The parts of GELU shared by forward and backward, for one element.
template <class T>
struct GeluParts {
  T s;      // s(2u) = 0.5 (1 + tanh u)
  T s_1ms;  // s (1 - s)
};

// ---------------------------------------------------------------- double

GeluParts<double> geluParts(double x) {
  const double u = kGeluScale * (x + kGeluCubic * x * x * x);
  const double e = std::exp(-2.0 * std::fabs(u));
  const double inv = 1.0 / (1.0 + e);
  return {u >= 0 ? inv : e * inv, e * inv * inv};
}

// ---------------------------------------------------------------- float, four lanes

using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));

F4 splat(float v) { return F4{v, v, v, v}; }

// exp(a) for a <= 0: a = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor
// series to r^7 (truncation below 5e-9 relative), times 2^n put directly into
// the exponent bits. Arguments below -87 (results below float's normal range)
// give 0; NaN stays NaN.
F4 expNonPositive(F4 a) {
  const I4 tiny = a < splat(-87.0f);
  a = tiny ? splat(-87.0f) : a;
  // Round a / ln2 to the nearest integer: adding 1.5 * 2^23 leaves no fraction bits.
  const F4 shifter = splat(12582912.0f);
  const F4 n = (a * splat(1.44269504f) + shifter) - shifter;
  // ln2 in two parts (the high part has few bits, so n * ln2_hi is exact).
  const F4 r = (a - n * splat(0.693145751953125f)) - n * splat(1.42860677e-6f);
  F4 p = splat(1.0f / 5040);
  p = p * r + splat(1.0f / 720);
  p = p * r + splat(1.0f / 120);
  p = p * r + splat(1.0f / 24);
  p = p * r + splat(1.0f / 6);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const I4 exponent = (__builtin_convertvector(n, I4) + 127) << 23;  // n in [-126, 0]
  F4 scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return tiny ? splat(0.0f) : p * scale;
}

struct GeluParts4 {
  F4 s, s_1ms;
};

GeluParts4 geluParts4(F4 x) {
  const F4 u = splat(float(kGeluScale)) * (x + splat(float(kGeluCubic)) * x * x * x);
  const F4 minus_abs_2u = u < splat(0.0f) ? splat(2.0f) * u : splat(-2.0f) * u;
  const F4 e = expNonPositive(minus_abs_2u);
  const F4 inv = splat(1.0f) / (splat(1.0f) + e);
  return {u >= splat(0.0f) ? inv : e * inv, e * inv * inv};
}

// Runs f(x4, i, lanes) over n elements in groups of four; the last group is
// padded with zeros so that it takes the same path as the others.
template <class F>
void forEachFour(const float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 v;
    std::memcpy(&v, x + i, sizeof v);
    f(v, i, 4);
  }
  if (i < n) {
    const int lanes = int(n - i);
    float tail[4] = {0, 0, 0, 0};
    std::memcpy(tail, x + i, sizeof(float) * std::size_t(lanes));
    F4 v;
    std::memcpy(&v, tail, sizeof v);
    f(v, i, lanes);
  }
}

void storeLanes(float* dst, F4 v, int lanes) { std::memcpy(dst, &v, sizeof(float) * std::size_t(lanes)); }

F4 loadLanes(const float* src, int lanes) {
  float tmp[4] = {0, 0, 0, 0};
  std::memcpy(tmp, src, sizeof(float) * std::size_t(lanes));
  F4 v;
  std::memcpy(&v, tmp, sizeof v);
  return v;
}

void geluForwardDouble(double* y, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * geluParts(x[i]).s;
}

void geluBackwardDouble(double* dx, const double* dy, const double* x, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const GeluParts<double> g = geluParts(v);
    const double du = kGeluScale * (1.0 + 3.0 * kGeluCubic * v * v);
    const double grad = (g.s + 2.0 * v * g.s_1ms * du) * dy[i];
    dx[i] = accumulate ? dx[i] + grad : grad;
  }
}

void geluForwardFloat(float* y, const float* x, int64_t n) {
  forEachFour(x, n, [&](F4 v, int64_t i, int lanes) { storeLanes(y + i, v * geluParts4(v).s, lanes); });
}

void geluBackwardFloat(float* dx, const float* dy, const float* x, int64_t n, bool accumulate) {
  const F4 scale = splat(float(kGeluScale));
  const F4 three_cubic = splat(float(3 * kGeluCubic));
  forEachFour(x, n, [&](F4 v, int64_t i, int lanes) {
    const GeluParts4 g = geluParts4(v);
    const F4 du = scale * (splat(1.0f) + three_cubic * v * v);
    F4 grad = (g.s + splat(2.0f) * v * g.s_1ms * du) * loadLanes(dy + i, lanes);
    if (accumulate) grad = loadLanes(dx + i, lanes) + grad;
    storeLanes(dx + i, grad, lanes);
  });
}

}  // namespace

template <class T>
void geluForward(T* y, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    geluForwardFloat(y, x, n);
  } else {
    geluForwardDouble(y, x, n);
  }
}

// Reads x[i] and dy[i] before writing dx[i], so dx may alias dy.
template <class T>
void geluBackward(T* dx, const T* dy, const T* x, int64_t n, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    geluBackwardFloat(dx, dy, x, n, accumulate);
  } else {
    geluBackwardDouble(dx, dy, x, n, accumulate);
  }
}

template void geluForward<float>(float*, const float*, int64_t);
template void geluForward<double>(double*, const double*, int64_t);
template void geluBackward<float>(float*, const float*, const float*, int64_t, bool);
template void geluBackward<double>(double*, const double*, const double*, int64_t, bool);

}  // namespace tandem::cpu
