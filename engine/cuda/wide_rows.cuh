#pragma once
// Rows too wide for a warp: a block per row (the RMSNorm in llama.cu, the
// LayerNorm in layernorm.cu). A block's kWideThreads threads hold a bf16
// row of c8 16-byte vectors in registers, kPer each (vector v = thread +
// kWideThreads k), and read it once. The backwards give each block of a
// fixed grid a contiguous range of rows in order, so that each column's
// parameter partial sums are one thread's registers.
#include <cstdint>

#include "engine/cuda/device_math.cuh"

namespace tandem::cuda::wide_rows {

constexpr int kThreads = 256;
constexpr int kMaxPer = 4;  // rows up to 8192 wide (Llama 2 70B's)

// Vectors per thread for rows of c8 vectors; 0 where the row is too wide.
inline int vectorsPerThread(int64_t c8) {
  const int64_t per = (c8 + kThreads - 1) / kThreads;
  return per <= kMaxPer ? int(per) : 0;
}

// Whether this thread holds vector k of a row of c8 vectors.
__device__ __forceinline__ bool holds(int k, int c8) { return int(threadIdx.x) + k * kThreads < c8; }

// Rows [begin, end) of this block when the grid splits M rows into
// contiguous ranges, in order.
struct RowRange {
  int64_t begin, end;
};
__device__ __forceinline__ RowRange rowRange(int64_t M) {
  const int64_t per = (M + gridDim.x - 1) / gridDim.x;
  const int64_t begin = min(M, int64_t(blockIdx.x) * per);
  return {begin, min(M, begin + per)};
}

// This thread's vectors of row `row` of a and b (the backward's dy and x).
template <int kPer>
__device__ __forceinline__ void loadRow(const uint4* a, const uint4* b, int64_t row, int c8, uint4 (&ra)[kPer],
                                        uint4 (&rb)[kPer]) {
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (holds(k, c8)) {
      const int64_t at = row * c8 + threadIdx.x + k * kThreads;
      ra[k] = a[at];
      rb[k] = b[at];
    }
}

}  // namespace tandem::cuda::wide_rows
