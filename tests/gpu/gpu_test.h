#pragma once
// A few helpers shared by the GPU test executables: skip (exit 77) without a
// GPU, relative error of two tensors, a failure counter and reporting.

#include <fmt/core.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/spec/job.h"

namespace tandem::gputest {

inline int& failures() {
  static int n = 0;
  return n;
}

// Exits 77 (skipped) when fewer than `needed` GPUs are usable.
inline void requireGpus(int needed) {
  std::string why;
  const int n = cuda::usableGpuCount(&why);
  if (n < needed) {
    fmt::print("SKIP: needs {} GPU(s), found {} ({})\n", needed, n, why.empty() ? "too few" : why);
    std::exit(77);
  }
}

// ||a - b|| / ||b||; NaN anywhere gives +inf so it never passes.
inline double relError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

inline void expectBelow(const std::string& what, double value, double limit) {
  const bool ok = value <= limit;
  fmt::print("{} {:<48} {:.3e} (limit {:.0e})\n", ok ? "ok  " : "FAIL", what, value, limit);
  if (!ok) ++failures();
}

inline void expectTrue(const std::string& what, bool ok) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures();
}

inline std::vector<float> randomVector(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The embedded tiny job (gpt2-tiny) with `--set`-style overrides.
inline JobSpec tiny(const std::vector<std::string>& sets) {
  const JobSpec base = tinyJob();
  return parseJob(base.yaml, base.source, sets);
}

inline int finish() {
  fmt::print("{}\n", failures() == 0 ? "ALL PASSED" : fmt::format("{} FAILED", failures()));
  return failures() == 0 ? 0 : 1;
}

}  // namespace tandem::gputest
