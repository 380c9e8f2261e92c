#pragma once
// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's crc32
// instruction): the checksum of checkpoint files. Checkpoints of a 7B model
// are tens of gigabytes; the instruction checks them at several GB/s where
// a byte-at-a-time hash (FNV-1a, about 1 GB/s) held the writer up as much
// as the disk did.
#include <cstddef>
#include <cstdint>

namespace tandem::checkpoint {

// The CRC of `size` bytes continued from `crc` (0 to start): crc32c(crc32c(0,
// a), b) == crc32c(0, a then b). Uses the CPU's crc32 instruction where it
// has one, a table otherwise; both give the same value.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

// The table path alone (tests compare the two).
uint32_t crc32cPortable(uint32_t crc, const void* data, size_t size);

}  // namespace tandem::checkpoint
