#pragma once
// A small deterministic random generator (splitmix64) so that every platform
// and executor draws the same numbers for the same seed.

#include <cmath>
#include <cstdint>

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
  // Standard normal (Box-Muller; two calls of next()).
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

}  // namespace tandem
