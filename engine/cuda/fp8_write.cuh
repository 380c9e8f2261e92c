#pragma once
// What every kernel that writes FP8 shares (fp8.cu's casts, llama.cu's
// norm and activations writing FP8 under delayed scaling): the code of a
// value, and a delayed-scaling writer's closing step.
#include <cuda_fp8.h>

#include <cstdint>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {

// The saturating round-to-nearest-even FP8 code of v (engine/numerics/fp8.h):
// kFormat 0 E4M3, 1 E5M2.
template <int kFormat>
__device__ __forceinline__ uint8_t toFp8(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kFormat == 0 ? __NV_E4M3 : __NV_E5M2));
}

// Eight values' codes of v * scale, as two little-endian words.
template <int kFormat>
__device__ __forceinline__ uint2 toFp8x8(const float (&v)[8], float scale) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo |= uint32_t(toFp8<kFormat>(__fmul_rn(v[k], scale))) << (8 * k);
    hi |= uint32_t(toFp8<kFormat>(__fmul_rn(v[k + 4], scale))) << (8 * k);
  }
  return make_uint2(lo, hi);
}

// Both layouts of FP8 codes in 64 x 64 tiles, the transposed one through
// shared memory: a byte more written per element instead of a pass that
// reads the codes again.
constexpr int kTile = 64;
using ByteTile = uint8_t[kTile][kTile + 4];  // a row padded by a word against bank conflicts

// The tile of in[r0.., c0..] (in[rows, cols]) stored transposed into
// out[cols, rows], four tile rows per 4-byte word; after __syncthreads.
__device__ __forceinline__ void storeTileTransposed(uint8_t* out, const ByteTile& tile, int64_t r0, int64_t c0,
                                                    int64_t rows, int64_t cols) {
  constexpr int kWords = kTile / 4;  // 4-byte words per transposed tile row
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += blockDim.x) {
    const int oc = idx / kWords, ow = idx % kWords;  // output row (a tile column), output word (4 tile rows)
    if (c0 + oc >= cols || r0 + 4 * ow >= rows) continue;
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) word |= uint32_t(tile[4 * ow + b][oc]) << (8 * b);
    *reinterpret_cast<uint32_t*>(out + (c0 + oc) * rows + r0 + 4 * ow) = word;
  }
}

// The block's tile at (r0, c0) of an FP8 output [rows, cols] stored with
// row stride ld at out and transposed ([cols, rows]) at out_t: values(r,
// c, f) gives the 8 values of row r from column c (cols a multiple of 8,
// rows of 4); the codes of value x scale. Returns the largest |value| this
// thread saw. Every thread of the block calls it (it synchronizes).
template <int kFormat, class Values>
__device__ __forceinline__ float storeTileBothLayouts(uint8_t* out, int64_t ld, uint8_t* out_t, int64_t rows,
                                                      int64_t cols, int64_t r0, int64_t c0, float scale,
                                                      ByteTile& tile, Values values) {
  float m = 0.f;
  constexpr int kChunks = kTile / 8;  // 8-value chunks per tile row
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += blockDim.x) {
    const int tr = idx / kChunks, tc = idx % kChunks;
    const int64_t r = r0 + tr, c = c0 + 8 * tc;
    uint2 codes = make_uint2(0, 0);
    if (r < rows && c < cols) {
      float f[8];
      values(r, c, f);
#pragma unroll
      for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[k]));
      codes = toFp8x8<kFormat>(f, scale);
      *reinterpret_cast<uint2*>(out + r * ld + c) = codes;
    }
    *reinterpret_cast<uint32_t*>(&tile[tr][8 * tc]) = codes.x;
    *reinterpret_cast<uint32_t*>(&tile[tr][8 * tc + 4]) = codes.y;
  }
  __syncthreads();
  storeTileTransposed(out_t, tile, r0, c0, rows, cols);
  __syncthreads();  // the tile may be filled again
  return m;
}

// Closes a delayed-scaling write: the block's largest |value| (m, each
// thread's; fmaxf has skipped NaN) into its key's amax for this step, and
// 1 / scale for the GEMMs that read the output (block 0). An atomic max of
// a non-negative float's bits is the float's max, whatever the order the
// blocks come in: the state is the same bits in a graph replay and an eager
// step. Every thread of the block calls it.
__device__ __forceinline__ void finishFp8Write(float m, float scale, const Fp8Write& w) {
  __shared__ float shared[32];
  m = blockMax(m, shared);
  if (threadIdx.x != 0) return;
  // Most blocks see a smaller amax than one already there: read first.
  const unsigned bits = __float_as_uint(m);
  if (m > 0.f && bits > *reinterpret_cast<volatile unsigned*>(w.amax)) atomicMax(w.amax, bits);
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    const float inv = __frcp_rn(scale);
    *w.scale_inv = inv;
    if (w.scale_inv_t) *w.scale_inv_t = inv;
  }
}

}  // namespace tandem::cuda
