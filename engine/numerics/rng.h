#pragma once
// A small deterministic random generator (splitmix64) so that every platform
// and executor draws the same numbers for the same seed.

#include <cmath>
#include <cstdint>

#include "engine/numerics/portable_normal.h"

namespace tandem {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  // Advances as n calls of next() would (the state moves by a constant per
  // call): a stream can be split into chunks drawn on several threads.
  void skip(uint64_t n) { state_ += n * 0x9E3779B97F4A7C15ull; }
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller's cosine half; two calls of next()), with
  // the logarithm and cosine of portable_normal.h: the GPU draws the same
  // bits (portable::normalAt gives the i-th of a stream without the others).
  double normal() {
    const double u1 = portable::sub(1.0, uniform()), u2 = uniform();
    return portable::mul(portable::squareRoot(portable::mul(-2.0, portable::logOf(u1))), portable::cos2Pi(u2));
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

}  // namespace tandem
