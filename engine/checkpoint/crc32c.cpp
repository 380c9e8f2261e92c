#include "engine/checkpoint/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tandem::checkpoint {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

// Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables makeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}

constexpr Tables kTables = makeTables();

uint32_t portable(uint32_t state, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts only (x86-64, aarch64)
    const uint64_t x = word ^ state;
    state = kTables[7][x & 0xFF] ^ kTables[6][(x >> 8) & 0xFF] ^ kTables[5][(x >> 16) & 0xFF] ^
            kTables[4][(x >> 24) & 0xFF] ^ kTables[3][(x >> 32) & 0xFF] ^ kTables[2][(x >> 40) & 0xFF] ^
            kTables[1][(x >> 48) & 0xFF] ^ kTables[0][x >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xFFu];
  return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t hardware(uint32_t state, const unsigned char* p, size_t n) {
  uint64_t s = state;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    s = _mm_crc32_u64(s, word);
    p += 8;
    n -= 8;
  }
  uint32_t s32 = uint32_t(s);
  while (n--) s32 = _mm_crc32_u8(s32, *p++);
  return s32;
}

bool hasHardwareCrc() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32cPortable(uint32_t crc, const void* data, size_t size) {
  return ~portable(~crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (hasHardwareCrc()) return ~hardware(~crc, static_cast<const unsigned char*>(data), size);
#endif
  return crc32cPortable(crc, data, size);
}

}  // namespace tandem::checkpoint
