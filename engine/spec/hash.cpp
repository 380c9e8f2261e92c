#include <cstddef>
#include <cstdint>

#include "engine/numerics/init.h"

namespace tandem {

// FNV-1a, 64-bit: tiny, dependency-free and stable across platforms, which is
// all a content hash of a job text or a per-name seed needs. Not for security.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  constexpr uint64_t kPrime = 1099511628211ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= kPrime;
  }
  return h;
}

}  // namespace tandem
