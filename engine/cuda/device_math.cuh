#pragma once
// Device helpers shared by the kernel files: element loads and stores for the
// two activation types, warp and block reductions, the dtype dispatch.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "engine/cuda/check.h"
#include "engine/ir/types.h"

namespace tandem::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float toF(float x) { return x; }
__device__ __forceinline__ float toF(bf16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T fromF(float x);
template <>
__device__ __forceinline__ float fromF<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 fromF<bf16>(float x) { return __float2bfloat16_rn(x); }

// Side tensors whose dtype is only known at run time (uniform branch).
__device__ __forceinline__ float loadAny(const void* p, int is_bf16, int64_t i) {
  return is_bf16 ? __bfloat162float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void storeAny(void* p, int is_bf16, int64_t i, float v) {
  if (is_bf16)
    static_cast<bf16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum in a fixed order (deterministic); `shared` holds 32 floats.
__device__ __forceinline__ float blockSum(float v, float* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = (threadIdx.x < warps) ? shared[threadIdx.x] : 0.f;
  if (warp == 0) v = warpSum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}
__device__ __forceinline__ float blockMax(float v, float* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = (threadIdx.x < warps) ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0) v = warpMax(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

// Partial column sums of an [M, N] matrix read through load(row, col): the
// body of a kernel with blockDim (32, 8) and grid (ceil(N / 32), slices);
// row slice blockIdx.y into partial[blockIdx.y * N + n], each block in a
// fixed order (the bias gradients, engine/cuda/elementwise.cu and fp8.cu).
template <class Load>
__device__ __forceinline__ void columnPartialSums(float* partial, Load load, int64_t M, int64_t N) {
  __shared__ float acc[8][33];
  const int64_t n = blockIdx.x * 32 + threadIdx.x;
  const int64_t rows_per = (M + gridDim.y - 1) / gridDim.y;
  const int64_t r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
  float s = 0.f;
  if (n < N)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += load(r, n);
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && n < N) {
    float t = 0.f;
    for (int j = 0; j < 8; ++j) t += acc[j][threadIdx.x];
    partial[blockIdx.y * N + n] = t;
  }
}

// bf16 fast paths: 8 elements per 16-byte access (memory-bound kernels).
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const bf16* h = reinterpret_cast<const bf16*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(h[i]);
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 u;
  bf16* h = reinterpret_cast<bf16*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __float2bfloat16_rn(f[i]);
  return u;
}
// Whether n is a multiple of 8 and every pointer 16-byte aligned (the
// 8-element paths above).
inline bool vec8(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 8 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

inline int isBf16(DType t) { return t == DType::BF16 ? 1 : 0; }
inline unsigned gridFor(int64_t n, int threads, int64_t cap = 1 << 20) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  return unsigned(g < cap ? g : cap);
}

}  // namespace tandem::cuda

// Calls F<T>(...) for the activation dtype.
#define TANDEM_DISPATCH_DT(dt, ...)                                              \
  do {                                                                          \
    if ((dt) == ::tandem::DType::BF16) {                                        \
      using T = ::tandem::cuda::bf16;                                           \
      __VA_ARGS__;                                                              \
    } else if ((dt) == ::tandem::DType::F32) {                                  \
      using T = float;                                                          \
      __VA_ARGS__;                                                              \
    } else {                                                                    \
      throw ::tandem::cuda::CudaError("CUDA kernel: activation dtype must be f32 or bf16"); \
    }                                                                           \
  } while (0)
