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
  if (m > 0.f && __float_as_uint(m) > *reinterpret_cast<volatile unsigned*>(w.amax)) atomicMax(w.amax, __float_as_uint(m));
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    const float inv = __frcp_rn(scale);
    *w.scale_inv = inv;
    if (w.scale_inv_t) *w.scale_inv_t = inv;
  }
}

}  // namespace tandem::cuda
