// Shared-memory addresses and Ampere-style asynchronous copies (cp.async),
// used by the kernels that stream tiles into shared memory (attention_tc.cu,
// gemm_gelu.cu).
#pragma once

#include <cstdint>

namespace tandem::cuda {

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a tile of
// 128-byte rows with the 128-byte swizzle (chunk c of row r at c ^ (r & 7)).
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// 16-byte asynchronous copy; with valid == false the destination is zeroed
// and nothing is read.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace tandem::cuda
