// The Llama family's kernels: RMSNorm, the SwiGLU gate, and the two layout
// kernels that run grouped-query attention with rotary embeddings through
// the multi-head attention kernels (as engine/cpu/kernels_llama.cpp does):
// the grouped qkv expanded into the [q | k | v] layout of H heads with q and
// k rotated, and the expanded gradient folded back (rotated back, summed
// over the query heads that share a key/value head).
//
// Every reduction runs in a fixed order (no atomics): a CUDA Graph replay
// and an eager step give the same bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "engine/cuda/attention_tc.h"
#include "engine/cuda/cp_async.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/fp8_write.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/wide_rows.cuh"
#include "engine/numerics/constants.h"  // one definition for both executors

namespace tandem::cuda {
namespace {

constexpr float kRmsEps = float(kRmsNormEps);
constexpr int kWarps = 8;         // rows per block of the row kernels, one warp each
constexpr int kThreads = 256;

// One row of C elements, lane-strided; 8 bf16 at a time when the row allows.
template <class T>
__device__ __forceinline__ float rowSumSquares(const T* x, int64_t C, int lane) {
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = toF(x[c]);
    s += v * v;
  }
  return warpSum(s);
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    rmsnormForwardKernel(T* y, void* rstd, int rstd_bf16, const T* x, const T* w, int64_t M, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
  if (row >= M) return;
  const T* xr = x + row * C;
  const float r = 1.f / sqrtf(rowSumSquares(xr, C, lane) / float(C) + kRmsEps);
  T* yr = y + row * C;
  for (int64_t c = lane; c < C; c += 32) yr[c] = fromF<T>(toF(xr[c]) * r * toF(w[c]));
  if (lane == 0) storeAny(rstd, rstd_bf16, row, r);
}

// One 16-byte vector of y = x r w.
__device__ __forceinline__ uint4 normedVector(const uint4& x, const uint4& w, float r) {
  float f[8], wv[8];
  unpack8(x, f);
  unpack8(w, wv);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = f[j] * r * wv[j];
  return pack8(f);
}

// bf16 rows of whole 16-byte vectors. C = 256 kV: the row held in registers
// (kV vectors per lane), one read of x; kV = 0: any C % 8 == 0, x streamed
// twice (the second pass hits L1/L2).
template <int kV>
__global__ void __launch_bounds__(kWarps * 32)
    rmsnormForwardVec(uint4* y, void* rstd, int rstd_bf16, const uint4* x, const uint4* w, int64_t M, int c8_any) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
  if (row >= M) return;
  if constexpr (kV == 0) {
    const uint4* xr = x + row * c8_any;
    float s = 0.f;
#pragma unroll 4
    for (int v = lane; v < c8_any; v += 32) {
      float f[8];
      unpack8(xr[v], f);
#pragma unroll
      for (int j = 0; j < 8; ++j) s += f[j] * f[j];
    }
    const float r = 1.f / sqrtf(warpSum(s) / float(c8_any * 8) + kRmsEps);
#pragma unroll 4
    for (int v = lane; v < c8_any; v += 32) y[row * c8_any + v] = normedVector(xr[v], w[v], r);
    if (lane == 0) storeAny(rstd, rstd_bf16, row, r);
  } else {
    constexpr int c8 = kV * 32;
    float v[kV][8];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      unpack8(x[row * c8 + k * 32 + lane], v[k]);
#pragma unroll
      for (int j = 0; j < 8; ++j) s += v[k][j] * v[k][j];
    }
    const float r = 1.f / sqrtf(warpSum(s) / float(c8 * 8) + kRmsEps);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      float wv[8];
      unpack8(w[k * 32 + lane], wv);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[k][j] = v[k][j] * r * wv[j];
      y[row * c8 + k * 32 + lane] = pack8(v[k]);
    }
    if (lane == 0) storeAny(rstd, rstd_bf16, row, r);
  }
}

// One 16-byte vector of dx = r (dy w - x r mean) from its dy (g), x and w,
// stored at `out` (added to what it holds when accumulating).
__device__ __forceinline__ void storeRmsnormDx(uint4* out, const float (&g)[8], const float (&xv)[8],
                                               const float (&ww)[8], float r, float mean, bool accumulate) {
  float v[8];
  if (accumulate) unpack8(*out, v);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float d = r * (g[j] * ww[j] - xv[j] * r * mean);
    v[j] = accumulate ? v[j] + d : d;
  }
  *out = pack8(v);
}

// dx = r (dy w - xhat mean(dy w xhat)), xhat = x r, one warp per row. Reads
// the whole row of dy and x before it writes dx (dx may alias dy).
template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    rmsnormBackwardDataKernel(T* dx, const T* dy, const T* x, const T* w, const void* rstd, int rstd_bf16,
                              int64_t M, int64_t C, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
  if (row >= M) return;
  const T* dyr = dy + row * C;
  const T* xr = x + row * C;
  const float r = loadAny(rstd, rstd_bf16, row);
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += toF(dyr[c]) * toF(w[c]) * toF(xr[c]) * r;
  const float mean = warpSum(s) / float(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = r * (toF(dyr[c]) * toF(w[c]) - toF(xr[c]) * r * mean);
    dxr[c] = fromF<T>(accumulate ? toF(dxr[c]) + g : g);
  }
}

// Partial column sums of dy * x * r over kBiasRowChunks slices of the rows
// (one block column of 32 columns x 8 row lanes per slice), summed in a
// fixed order: partial[slice][c]. biasGradientFromPartials adds the slices.
template <class T>
__global__ void rmsnormWeightPartialKernel(float* partial, const T* dy, const T* x, const void* rstd, int rstd_bf16,
                                           int64_t M, int64_t C) {
  __shared__ float sums[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t per = (M + gridDim.y - 1) / gridDim.y;
  const int64_t begin = blockIdx.y * per, end = min(M, begin + per);
  float s = 0.f;
  if (c < C)
    for (int64_t m = begin + threadIdx.y; m < end; m += 8)
      s += toF(dy[m * C + c]) * toF(x[m * C + c]) * loadAny(rstd, rstd_bf16, m);
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) t += sums[k][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

// The bf16 backward for rows of whole 16-byte vectors (C % 8 == 0): the
// row's dy and x are read as vectors, kV per lane held in registers when
// the row fits (C = 256 kV), else streamed twice (the second pass hits L1/L2).
template <int kV>
__global__ void __launch_bounds__(kWarps * 32)
    rmsnormBackwardDataVec(bf16* dx, const bf16* dy, const bf16* x, const bf16* w, const void* rstd, int rstd_bf16,
                           int64_t M, int c8, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
  if (row >= M) return;
  const uint4* dyr = reinterpret_cast<const uint4*>(dy) + row * c8;
  const uint4* xr = reinterpret_cast<const uint4*>(x) + row * c8;
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  uint4* dxr = reinterpret_cast<uint4*>(dx) + row * c8;
  const float r = loadAny(rstd, rstd_bf16, row);
  float s = 0.f;
  auto gradient = [&](const float (&g)[8], const float (&xv)[8], const float (&ww)[8], float mean, int v) {
    storeRmsnormDx(dxr + v, g, xv, ww, r, mean, accumulate);
  };
  if constexpr (kV > 0) {
    float g[kV][8], xv[kV][8];
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      unpack8(dyr[k * 32 + lane], g[k]);
      unpack8(xr[k * 32 + lane], xv[k]);
    }
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      float ww[8];
      unpack8(wv[k * 32 + lane], ww);
#pragma unroll
      for (int j = 0; j < 8; ++j) s += g[k][j] * ww[j] * xv[k][j] * r;
    }
    const float mean = warpSum(s) / float(c8 * 8);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      float ww[8];
      unpack8(wv[k * 32 + lane], ww);
      gradient(g[k], xv[k], ww, mean, k * 32 + lane);
    }
  } else {
#pragma unroll 4
    for (int v = lane; v < c8; v += 32) {
      float g[8], xv[8], ww[8];
      unpack8(dyr[v], g);
      unpack8(xr[v], xv);
      unpack8(wv[v], ww);
#pragma unroll
      for (int j = 0; j < 8; ++j) s += g[j] * ww[j] * xv[j] * r;
    }
    const float mean = warpSum(s) / float(c8 * 8);
    // dx may alias dy: every lane has read its whole share of the row above,
    // and each vector is read and written by the same lane below.
#pragma unroll 4
    for (int v = lane; v < c8; v += 32) {
      float g[8], xv[8], ww[8];
      unpack8(dyr[v], g);
      unpack8(xr[v], xv);
      unpack8(wv[v], ww);
      gradient(g, xv, ww, mean, v);
    }
  }
}

// The weight gradient's partial sums with 8 bf16 columns per thread: a warp
// reads 512 contiguous bytes of a row; 8 row lanes per slice, summed in order.
__global__ void __launch_bounds__(256)
    rmsnormWeightPartialVec(float* partial, const bf16* dy, const bf16* x, const void* rstd, int rstd_bf16, int64_t M,
                            int c8) {
  __shared__ float sums[8][32 * 8 + 1];
  const int v = blockIdx.x * 32 + threadIdx.x;
  const int64_t per = (M + gridDim.y - 1) / gridDim.y;
  const int64_t begin = blockIdx.y * per, end = min(M, begin + per);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (v < c8) {
#pragma unroll 4
    for (int64_t m = begin + threadIdx.y; m < end; m += 8) {
      float g[8], xv[8];
      unpack8(reinterpret_cast<const uint4*>(dy)[m * c8 + v], g);
      unpack8(reinterpret_cast<const uint4*>(x)[m * c8 + v], xv);
      const float r = loadAny(rstd, rstd_bf16, m);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += g[j] * xv[j] * r;
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) sums[threadIdx.y][threadIdx.x * 8 + j] = acc[j];
  __syncthreads();
  // 256 threads, one column each of the block's 256: the 8 row lanes in order.
  const int t = threadIdx.y * 32 + threadIdx.x;
  const int64_t c = int64_t(blockIdx.x) * 256 + t;
  if (c < int64_t(c8) * 8) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) total += sums[k][t];
    partial[blockIdx.y * int64_t(c8) * 8 + c] = total;
  }
}

// ---- rows too wide for a warp: a block per row --------------------------
// Llama 2 7B's rows are 4096 wide (512 vectors). With a warp per row, the
// row streamed twice, the forward took 41 us per micro-batch and the
// backward 88 (dx) + 76 us (the weight's sums, a kernel of its own) on one
// H200, a third of the memory bandwidth. Here a block per row
// (wide_rows.cuh) reads it once.
constexpr int kWideThreads = wide_rows::kThreads;

// Every thread's v summed over the block, in one fixed order (each thread
// adds the warps' sums the same way). `red`: kWideThreads / 32 floats, not
// reused before the block's next barrier.
__device__ __forceinline__ float blockSum(float v, float* red) {
  v = warpSum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kWideThreads / 32; ++w) t += red[w];
  return t;
}

// grid: one block per row.
template <int kPer>
__global__ void __launch_bounds__(kWideThreads)
    rmsnormForwardWide(uint4* y, void* rstd, int rstd_bf16, const uint4* x, const uint4* w, int c8) {
  __shared__ float red[kWideThreads / 32];
  const int64_t row = blockIdx.x;
  uint4 xv[kPer];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int v = threadIdx.x + k * kWideThreads;
    if (v >= c8) continue;
    xv[k] = x[row * c8 + v];
    float f[8];
    unpack8(xv[k], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) s += f[j] * f[j];
  }
  const float r = 1.f / sqrtf(blockSum(s, red) / float(c8 * 8) + kRmsEps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int v = threadIdx.x + k * kWideThreads;
    if (v >= c8) continue;
    y[row * c8 + v] = normedVector(xv[k], w[v], r);
  }
  if (threadIdx.x == 0) storeAny(rstd, rstd_bf16, row, r);
}

// grid: kBiasVecChunks blocks; block b takes rows [b per, (b + 1) per),
// per = ceil(M / chunks), in order: dx of each, and the weight's partial
// sums of dy x r over its rows into partial[b][c] (each column one thread's,
// so the sums need no reduction across threads; biasGradientFromPartials
// adds the blocks' rows in order). The next row's dy and x are loaded before
// this row's sum is reduced. dx may alias dy: a row's vectors are read into
// registers before any is written, each by the thread that writes it.
template <int kPer>
__global__ void __launch_bounds__(kWideThreads)
    rmsnormBackwardWide(uint4* dx, float* partial, const uint4* dy, const uint4* x, const uint4* w, const void* rstd,
                        int rstd_bf16, int64_t M, int c8, bool accumulate) {
  __shared__ float red[2][kWideThreads / 32];  // by row parity (blockSum)
  const auto [begin, end] = wide_rows::rowRange(M);
  auto valid = [&](int k) { return wide_rows::holds(k, c8); };
  float acc[kPer][8];
#pragma unroll
  for (int k = 0; k < kPer; ++k)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[k][j] = 0.f;
  uint4 g[kPer], xv[kPer];
  auto unpackVector = [&](int k, float (&gf)[8], float (&xf)[8], float (&wf)[8]) {  // dy, x, w of vector k
    unpack8(g[k], gf);
    unpack8(xv[k], xf);
    unpack8(w[threadIdx.x + k * kWideThreads], wf);
  };
  if (begin < end) wide_rows::loadRow(dy, x, begin, c8, g, xv);
  for (int64_t row = begin; row < end; ++row) {
    uint4 g_next[kPer], x_next[kPer];
    if (row + 1 < end) wide_rows::loadRow(dy, x, row + 1, c8, g_next, x_next);
    const float r = loadAny(rstd, rstd_bf16, row);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!valid(k)) continue;
      float gf[8], xf[8], wf[8];
      unpackVector(k, gf, xf, wf);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s += gf[j] * wf[j] * xf[j] * r;
        acc[k][j] += gf[j] * xf[j] * r;
      }
    }
    const float mean = blockSum(s, red[row & 1]) / float(c8 * 8);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!valid(k)) continue;
      float gf[8], xf[8], wf[8];
      unpackVector(k, gf, xf, wf);
      storeRmsnormDx(dx + row * c8 + threadIdx.x + k * kWideThreads, gf, xf, wf, r, mean, accumulate);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) g[k] = g_next[k], xv[k] = x_next[k];
  }
  float* mine = partial + int64_t(blockIdx.x) * c8 * 8;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!valid(k)) continue;
    float4* out = reinterpret_cast<float4*>(mine + (threadIdx.x + k * kWideThreads) * 8);
    out[0] = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    out[1] = make_float4(acc[k][4], acc[k][5], acc[k][6], acc[k][7]);
  }
}

// The wide kernels' vectors per thread for rows of c8 vectors; 0 where the
// row is too wide for them.
int widePer(int64_t c8) { return wide_rows::vectorsPerThread(c8); }

__device__ __forceinline__ float sigmoidf(float g) { return 1.f / (1.f + expf(-g)); }

// SwiGLU's value for gate g and up u, and its two gradients for dy d
// (d gate = d u sigmoid(g) (1 + g (1 - sigmoid(g))), d up = d silu(g)):
// the one formula every SwiGLU kernel below computes.
__device__ __forceinline__ float swiglu(float g, float u) { return g * sigmoidf(g) * u; }
__device__ __forceinline__ void swigluGrad(float g, float u, float d, float& dg, float& du) {
  const float sg = sigmoidf(g);
  dg = d * u * sg * (1.f + g * (1.f - sg));
  du = d * g * sg;
}
// The same on 16-byte vectors of bf16 rows (x rows [gate | up] of 2 f8
// vectors): vector f of row r of the output.
__device__ __forceinline__ void swiglu8Of(const uint4& gate, const uint4& up, float (&v)[8]) {
  float u[8];
  unpack8(gate, v);
  unpack8(up, u);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = swiglu(v[j], u[j]);
}
__device__ __forceinline__ void swiglu8(const uint4* x, int64_t r, int64_t f8, int64_t f, float (&v)[8]) {
  swiglu8Of(x[r * 2 * f8 + f], x[r * 2 * f8 + f8 + f], v);
}
__device__ __forceinline__ void swigluGrad8Of(const uint4& gate, const uint4& up, const uint4& dy, float (&dg)[8],
                                              float (&du)[8]) {
  float g[8], u[8], d[8];
  unpack8(gate, g);
  unpack8(up, u);
  unpack8(dy, d);
#pragma unroll
  for (int j = 0; j < 8; ++j) swigluGrad(g[j], u[j], d[j], dg[j], du[j]);
}
__device__ __forceinline__ void swigluGrad8(const uint4* x, const uint4* dy, int64_t r, int64_t f8, int64_t f,
                                            float (&dg)[8], float (&du)[8]) {
  swigluGrad8Of(x[r * 2 * f8 + f], x[r * 2 * f8 + f8 + f], dy[r * f8 + f], dg, du);
}
__device__ __forceinline__ float absMax8(float m, const float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
  return m;
}

// An FP8 cast's amax taken where its input is written (amax non-null,
// gpu_footprint::fp8AmaxProducers): the block's largest |value| over what
// it stored, into amax[blockIdx.x]. Rounding to the stored type is
// monotonic, so the rounded maximum is the maximum of the rounded values;
// fmaxf skips NaN as the cast's own pass does. Every thread of the block
// calls it.
template <class T>
__device__ __forceinline__ void storeBlockAmax(float m, float* amax) {
  __shared__ float shared[32];
  m = blockMax(m, shared);
  if (threadIdx.x == 0) amax[blockIdx.x] = toF(fromF<T>(m));
}

// x rows are [gate (F) | up (F)], y rows F wide: y = silu(gate) up.
template <class T>
__global__ void swigluForwardKernel(T* y, const T* x, int64_t M, int64_t F, float* amax) {
  float m_abs = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / F, f = i - m * F;
    const float g = toF(x[m * 2 * F + f]), u = toF(x[m * 2 * F + F + f]);
    const float v = swiglu(g, u);
    y[i] = fromF<T>(v);
    m_abs = fmaxf(m_abs, fabsf(v));
  }
  if (amax) storeBlockAmax<T>(m_abs, amax);
}

// d gate = dy up sigmoid(g) (1 + g (1 - sigmoid(g))), d up = dy silu(g).
template <class T>
__global__ void swigluBackwardKernel(T* dx, const T* dy, const T* x, int64_t M, int64_t F, bool accumulate,
                                     float* amax) {
  float m_abs = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / F, f = i - m * F;
    const int64_t gi = m * 2 * F + f, ui = gi + F;
    float dg, du;
    swigluGrad(toF(x[gi]), toF(x[ui]), toF(dy[i]), dg, du);
    if (accumulate) dg = toF(dx[gi]) + dg, du = toF(dx[ui]) + du;
    dx[gi] = fromF<T>(dg);
    dx[ui] = fromF<T>(du);
    m_abs = fmaxf(m_abs, fmaxf(fabsf(dg), fabsf(du)));
  }
  if (amax) storeBlockAmax<T>(m_abs, amax);
}

// The same with 8 bf16 per thread (F % 8 == 0, 16-byte aligned rows).
__global__ void swigluForwardVec(uint4* y, const uint4* x, int64_t M, int64_t f8, float* amax) {
  float m_abs = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * f8; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / f8, f = i - m * f8;
    float v[8];
    swiglu8(x, m, f8, f, v);
    m_abs = absMax8(m_abs, v);
    y[i] = pack8(v);
  }
  if (amax) storeBlockAmax<bf16>(m_abs, amax);
}

__global__ void swigluBackwardVec(uint4* dx, const uint4* dy, const uint4* x, int64_t M, int64_t f8, bool accumulate,
                                  float* amax) {
  float m_abs = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * f8; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / f8, f = i - m * f8;
    const int64_t gi = m * 2 * f8 + f, ui = gi + f8;
    float dg[8], du[8];
    swigluGrad8(x, dy, m, f8, f, dg, du);
    if (accumulate) {
      float dg0[8], du0[8];
      unpack8(dx[gi], dg0);
      unpack8(dx[ui], du0);
#pragma unroll
      for (int j = 0; j < 8; ++j) dg[j] = dg0[j] + dg[j], du[j] = du0[j] + du[j];
    }
    m_abs = absMax8(absMax8(m_abs, dg), du);
    dx[gi] = pack8(dg);
    dx[ui] = pack8(du);
  }
  if (amax) storeBlockAmax<bf16>(m_abs, amax);
}

// Position t's rotation of frequency i of a head D wide, in double as the
// CPU reference computes it (the angle reaches t radians; fp32 would lose
// the low bits of long sequences' angles).
__device__ __forceinline__ void ropeAngle(int64_t t, int i, int D, double* c, double* s) {
  const double angle = double(t) * pow(kRopeTheta, -2.0 * double(i) / double(D));
  sincos(angle, s, c);
}

// One thread per (token, frequency i < D/2): the rotation is computed once
// and applied to the token's H query heads and KV key heads.
// Grouped row: KV groups of [R query heads | k | v], each D wide.
template <class T>
__global__ void expandGroupedQkvKernel(T* full, const T* qkv, int64_t BT, int Tn, int H, int KV, int D) {
  const int half = D / 2, R = H / KV;
  const int64_t C = int64_t(H) * D, width = int64_t(H + 2 * KV) * D;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < BT * half;
       n += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = n / half;
    const int i = int(n - bt * half);
    double c, s;
    ropeAngle(bt % Tn, i, D, &c, &s);
    const T* src = qkv + bt * width;
    T* dst = full + bt * 3 * C;
    for (int kv = 0; kv < KV; ++kv) {
      const T* group = src + int64_t(kv) * (R + 2) * D;
      const T* k = group + int64_t(R) * D;
      const T* v = k + D;
      const double k0 = toF(k[i]), k1 = toF(k[i + half]);
      const T rk0 = fromF<T>(float(k0 * c - k1 * s)), rk1 = fromF<T>(float(k0 * s + k1 * c));
      const T v0 = v[i], v1 = v[i + half];
      for (int j = 0; j < R; ++j) {
        const int64_t h = int64_t(kv) * R + j;
        const double q0 = toF(group[j * D + i]), q1 = toF(group[j * D + i + half]);
        dst[h * D + i] = fromF<T>(float(q0 * c - q1 * s));
        dst[h * D + i + half] = fromF<T>(float(q0 * s + q1 * c));
        dst[C + h * D + i] = rk0;
        dst[C + h * D + i + half] = rk1;
        dst[2 * C + h * D + i] = v0;
        dst[2 * C + h * D + i + half] = v1;
      }
    }
  }
}

// The expanded gradient back into the grouped layout: dq rotated back, dk
// rotated back and summed over the group's heads (in head order), dv summed.
template <class T>
__global__ void foldGroupedQkvKernel(T* dqkv, const T* dfull, int64_t BT, int Tn, int H, int KV, int D,
                                     bool accumulate) {
  const int half = D / 2, R = H / KV;
  const int64_t C = int64_t(H) * D, width = int64_t(H + 2 * KV) * D;
  auto put = [&](T* p, float v) { *p = fromF<T>(accumulate ? toF(*p) + v : v); };
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < BT * half;
       n += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = n / half;
    const int i = int(n - bt * half);
    double c, s;
    ropeAngle(bt % Tn, i, D, &c, &s);
    const T* src = dfull + bt * 3 * C;
    T* dst = dqkv + bt * width;
    for (int kv = 0; kv < KV; ++kv) {
      T* group = dst + int64_t(kv) * (R + 2) * D;
      float dk0 = 0.f, dk1 = 0.f, dv0 = 0.f, dv1 = 0.f;
      for (int j = 0; j < R; ++j) {
        const int64_t h = int64_t(kv) * R + j;
        const double q0 = toF(src[h * D + i]), q1 = toF(src[h * D + i + half]);
        put(group + j * D + i, float(q0 * c + q1 * s));
        put(group + j * D + i + half, float(-q0 * s + q1 * c));
        const double k0 = toF(src[C + h * D + i]), k1 = toF(src[C + h * D + i + half]);
        dk0 += float(k0 * c + k1 * s);
        dk1 += float(-k0 * s + k1 * c);
        dv0 += toF(src[2 * C + h * D + i]);
        dv1 += toF(src[2 * C + h * D + i + half]);
      }
      T* k = group + int64_t(R) * D;
      put(k + i, dk0);
      put(k + i + half, dk1);
      put(k + D + i, dv0);
      put(k + D + i + half, dv1);
    }
  }
}

// bf16 with 16-byte vectors (half = D/2 a multiple of 8): one thread per
// (token, key/value group, vector j of the half), frequencies 8j..8j+7, so
// every access is a 16-byte vector. The angles are those of ropeAngle.
struct Rotation8 {
  float c[8], s[8];
  __device__ Rotation8(int64_t t, int j, int D) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      double cd, sd;
      ropeAngle(t, 8 * j + e, D, &cd, &sd);
      c[e] = float(cd), s[e] = float(sd);
    }
  }
  // The same values from a table of (cos, sin) pairs (ropeAnglesKernel):
  // at frequencies 8j..8j+7 of one position, 16-byte aligned.
  __device__ explicit Rotation8(const float2* angles) {
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const float4 v = *reinterpret_cast<const float4*>(angles + e);
      c[e] = v.x, s[e] = v.y, c[e + 1] = v.z, s[e + 1] = v.w;
    }
  }
  // (x, y) = the pair of vectors (va, vb) rotated, or rotated back.
  template <bool kInverse>
  __device__ __forceinline__ void apply(const uint4& va, const uint4& vb, float (&x)[8], float (&y)[8]) const {
    float a[8], b[8];
    unpack8(va, a);
    unpack8(vb, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if constexpr (kInverse) {
        x[e] = a[e] * c[e] + b[e] * s[e];
        y[e] = -a[e] * s[e] + b[e] * c[e];
      } else {
        x[e] = a[e] * c[e] - b[e] * s[e];
        y[e] = a[e] * s[e] + b[e] * c[e];
      }
    }
  }
};

// The 16-byte kernels' work item n: token bt, key/value group kv, vector j
// of a head's first half (frequencies 8j..8j+7).
struct GroupedLane {
  int64_t bt;
  int kv, j;
  __device__ GroupedLane(int64_t n, int half8, int KV)
      : bt(n / (int64_t(half8) * KV)), kv(int((n / half8) % KV)), j(int(n % half8)) {}
};

__global__ void expandGroupedQkvVec(uint4* full, const uint4* qkv, int64_t BT, int Tn, int H, int KV, int D) {
  const int half8 = D / 16, d8 = D / 8, R = H / KV;
  const int64_t c8 = int64_t(H) * d8, width8 = int64_t(H + 2 * KV) * d8;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < BT * KV * half8;
       n += int64_t(gridDim.x) * blockDim.x) {
    const GroupedLane at(n, half8, KV);
    const int j = at.j, kv = at.kv;
    const int64_t bt = at.bt;
    const Rotation8 rot(bt % Tn, j, D);
    const uint4* group = qkv + bt * width8 + int64_t(kv) * (R + 2) * d8;
    uint4* dst = full + bt * 3 * c8;
    // Rotates the pair of vectors (j, j + half) of the head at `src` into `out`.
    auto rotate = [&](const uint4* src, uint4* out) {
      float x[8], y[8];
      rot.apply<false>(src[j], src[j + half8], x, y);
      out[j] = pack8(x);
      out[j + half8] = pack8(y);
    };
    // The key's rotated pair once, written for each query head of the group.
    uint4 k0, k1;
    {
      float x[8], y[8];
      rot.apply<false>(group[int64_t(R) * d8 + j], group[int64_t(R) * d8 + j + half8], x, y);
      k0 = pack8(x), k1 = pack8(y);
    }
    const uint4 v0 = group[int64_t(R + 1) * d8 + j], v1 = group[int64_t(R + 1) * d8 + j + half8];
    for (int r = 0; r < R; ++r) {
      const int64_t h = int64_t(kv) * R + r;
      rotate(group + int64_t(r) * d8, dst + h * d8);
      dst[c8 + h * d8 + j] = k0;
      dst[c8 + h * d8 + j + half8] = k1;
      dst[2 * c8 + h * d8 + j] = v0;
      dst[2 * c8 + h * d8 + j + half8] = v1;
    }
  }
}

__global__ void foldGroupedQkvVec(uint4* dqkv, const uint4* dfull, int64_t BT, int Tn, int H, int KV, int D,
                                  bool accumulate) {
  const int half8 = D / 16, d8 = D / 8, R = H / KV;
  const int64_t c8 = int64_t(H) * d8, width8 = int64_t(H + 2 * KV) * d8;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < BT * KV * half8;
       n += int64_t(gridDim.x) * blockDim.x) {
    const GroupedLane at(n, half8, KV);
    const int j = at.j, kv = at.kv;
    const int64_t bt = at.bt;
    const Rotation8 rot(bt % Tn, j, D);
    const uint4* src = dfull + bt * 3 * c8;
    uint4* group = dqkv + bt * width8 + int64_t(kv) * (R + 2) * d8;
    // Adds (or writes) x, y at the pair (j, j + half) of the head at `out`.
    auto put = [&](uint4* out, float (&x)[8], float (&y)[8]) {
      if (accumulate) {
        float a[8], b[8];
        unpack8(out[j], a);
        unpack8(out[j + half8], b);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] += a[e], y[e] += b[e];
      }
      out[j] = pack8(x);
      out[j + half8] = pack8(y);
    };
    // The inverse rotation of the pair at `in` into x, y.
    auto unrotate = [&](const uint4* in, float (&x)[8], float (&y)[8]) {
      rot.apply<true>(in[j], in[j + half8], x, y);
    };
    float dk0[8] = {}, dk1[8] = {}, dv0[8] = {}, dv1[8] = {};
    for (int r = 0; r < R; ++r) {
      const int64_t h = int64_t(kv) * R + r;
      float x[8], y[8];
      unrotate(src + h * d8, x, y);
      put(group + int64_t(r) * d8, x, y);
      unrotate(src + c8 + h * d8, x, y);
      float v0[8], v1[8];
      unpack8(src[2 * c8 + h * d8 + j], v0);
      unpack8(src[2 * c8 + h * d8 + j + half8], v1);
#pragma unroll
      for (int e = 0; e < 8; ++e) dk0[e] += x[e], dk1[e] += y[e], dv0[e] += v0[e], dv1[e] += v1[e];
    }
    put(group + int64_t(R) * d8, dk0, dk1);
    put(group + int64_t(R + 1) * d8, dv0, dv1);
  }
}

// The rotary angles' (cos, sin) of positions [0, Tn), [Tn][D/2], as
// ropeAngle computes them: once per position and frequency, where drawing
// them per head and token made the rotation below bound by fp64 arithmetic
// (Llama 2 7B: 144 us a call for 134 MB moved).
__global__ void ropeAnglesKernel(float2* angles, int Tn, int D) {
  const int half = D / 2;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < int64_t(Tn) * half;
       n += int64_t(gridDim.x) * blockDim.x) {
    double c, s;
    ropeAngle(n / half, int(n % half), D, &c, &s);
    angles[n] = make_float2(float(c), float(s));
  }
}

// For the tensor-core attention, which reads the grouped layout as it is:
// the rotated queries and keys into qk, rows of KV groups of [R query heads
// | k]; V stays where the projection wrote it. (Rows padded by 128 bytes, so
// that Llama 2 7B's 16 KiB pitch is no power of two, changed nothing: per
// step of a 4-layer 7B on one H200, attention 6.64 / 6.65 ms padded against
// 6.61 / 6.53 unpadded, backward 21.03 / 20.96 against 20.97 / 20.69.)
__global__ void rotateGroupedQkVec(uint4* qk, const uint4* qkv, const float2* angles, int64_t BT, int Tn, int H,
                                   int KV, int D) {
  const int half8 = D / 16, d8 = D / 8, R = H / KV;
  const int64_t width8 = int64_t(H + 2 * KV) * d8, qk_pitch8 = int64_t(H + KV) * d8;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < BT * KV * half8;
       n += int64_t(gridDim.x) * blockDim.x) {
    const GroupedLane at(n, half8, KV);
    const Rotation8 rot(angles + (at.bt % Tn) * (D / 2) + 8 * at.j);
    const uint4* src = qkv + at.bt * width8 + int64_t(at.kv) * (R + 2) * d8;
    uint4* dst = qk + at.bt * qk_pitch8 + int64_t(at.kv) * (R + 1) * d8;
    for (int r = 0; r <= R; ++r) {  // the group's query heads, then its key (at R in both layouts)
      float x[8], y[8];
      rot.apply<false>(src[r * d8 + at.j], src[r * d8 + at.j + half8], x, y);
      dst[r * d8 + at.j] = pack8(x);
      dst[r * d8 + at.j + half8] = pack8(y);
    }
  }
}

}  // namespace

void rmsnormForward(void* y, void* rstd, DType rstd_dt, const void* x, const void* w, int64_t M, int64_t C, DType dt,
                    cudaStream_t s) {
  const unsigned blocks = unsigned((M + kWarps - 1) / kWarps);
  if (dt == DType::BF16 && vec8(C, {y, x, w})) {
    auto* yv = static_cast<uint4*>(y);
    auto* xv = static_cast<const uint4*>(x);
    auto* wv = static_cast<const uint4*>(w);
    const int rb = isBf16(rstd_dt), c8 = int(C / 8);
    // Rows beyond what a warp holds in registers (1024 wide): a block per row.
    if (const int per = C > 1024 ? widePer(c8) : 0; per > 0) {
      const unsigned rows = unsigned(M);
      switch (per) {
        case 1: rmsnormForwardWide<1><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8); break;
        case 2: rmsnormForwardWide<2><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8); break;
        case 3: rmsnormForwardWide<3><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8); break;
        default: rmsnormForwardWide<4><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8);
      }
      return TANDEM_CUDA_LAUNCH_CHECK();
    }
    switch (C % 256 == 0 ? C / 256 : 0) {
      case 1: rmsnormForwardVec<1><<<blocks, kWarps * 32, 0, s>>>(yv, rstd, rb, xv, wv, M, c8); break;
      case 2: rmsnormForwardVec<2><<<blocks, kWarps * 32, 0, s>>>(yv, rstd, rb, xv, wv, M, c8); break;
      case 3: rmsnormForwardVec<3><<<blocks, kWarps * 32, 0, s>>>(yv, rstd, rb, xv, wv, M, c8); break;
      case 4: rmsnormForwardVec<4><<<blocks, kWarps * 32, 0, s>>>(yv, rstd, rb, xv, wv, M, c8); break;
      default: rmsnormForwardVec<0><<<blocks, kWarps * 32, 0, s>>>(yv, rstd, rb, xv, wv, M, c8);
    }
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, rmsnormForwardKernel<T><<<blocks, kWarps * 32, 0, s>>>(
                             static_cast<T*>(y), rstd, isBf16(rstd_dt), static_cast<const T*>(x),
                             static_cast<const T*>(w), M, C));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void rmsnormBackward(void* dx, void* dw, const void* dy, const void* x, const void* w, const void* rstd,
                     DType rstd_dt, int64_t M, int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt,
                     float* scratch, cudaStream_t s) {
  // Rows of up to 8 vectors per lane (bf16 up to 2048 wide): one pass over
  // the row, the weight's sums per warp (layernorm.cu's kernel).
  if (rmsnormBackwardFused(dx, dw, dy, x, w, rstd, rstd_dt, M, C, accumulate_dx, accumulate_dw, dt, scratch, s))
    return;
  // Wider bf16 rows of whole vectors.
  if (dt == DType::BF16 && vec8(C, {dx, dy, x, w})) {
    const int c8 = int(C / 8);
    auto* dxb = static_cast<bf16*>(dx);
    auto* dyb = static_cast<const bf16*>(dy);
    auto* xb = static_cast<const bf16*>(x);
    auto* wb = static_cast<const bf16*>(w);
    // Rows a block holds in registers (up to 8192 wide): dx and the weight's
    // partial sums in one pass.
    if (const int per = widePer(c8); per > 0) {
      auto* dxv = static_cast<uint4*>(dx);
      auto* dyv = static_cast<const uint4*>(dy);
      auto* xv = static_cast<const uint4*>(x);
      auto* wv = static_cast<const uint4*>(w);
      const int rb = isBf16(rstd_dt);
      constexpr unsigned chunks = gpu_footprint::kBiasVecChunks;
      switch (per) {
        case 1: rmsnormBackwardWide<1><<<chunks, kWideThreads, 0, s>>>(dxv, scratch, dyv, xv, wv, rstd, rb, M, c8, accumulate_dx); break;
        case 2: rmsnormBackwardWide<2><<<chunks, kWideThreads, 0, s>>>(dxv, scratch, dyv, xv, wv, rstd, rb, M, c8, accumulate_dx); break;
        case 3: rmsnormBackwardWide<3><<<chunks, kWideThreads, 0, s>>>(dxv, scratch, dyv, xv, wv, rstd, rb, M, c8, accumulate_dx); break;
        default: rmsnormBackwardWide<4><<<chunks, kWideThreads, 0, s>>>(dxv, scratch, dyv, xv, wv, rstd, rb, M, c8, accumulate_dx);
      }
      TANDEM_CUDA_LAUNCH_CHECK();
      return biasGradientFromPartials(dw, scratch, C, chunks, accumulate_dw, dt, s);
    }
    // Wider still: the weight's partial sums first (dx may alias dy), then
    // dx, the row streamed twice. 256 row slices: GPT-2-sized rows give 3 column blocks, and 768
    // blocks keep every SM busy where 64 slices left it waiting on memory.
    rmsnormWeightPartialVec<<<dim3(unsigned((c8 + 31) / 32), gpu_footprint::kBiasVecChunks), dim3(32, 8), 0, s>>>(
        scratch, dyb, xb, rstd, isBf16(rstd_dt), M, c8);
    TANDEM_CUDA_LAUNCH_CHECK();
    const unsigned blocks = unsigned((M + kWarps - 1) / kWarps);
    const int rb = isBf16(rstd_dt);
    switch (C % 256 == 0 ? C / 256 : 0) {
      case 1: rmsnormBackwardDataVec<1><<<blocks, kWarps * 32, 0, s>>>(dxb, dyb, xb, wb, rstd, rb, M, c8, accumulate_dx); break;
      case 2: rmsnormBackwardDataVec<2><<<blocks, kWarps * 32, 0, s>>>(dxb, dyb, xb, wb, rstd, rb, M, c8, accumulate_dx); break;
      case 3: rmsnormBackwardDataVec<3><<<blocks, kWarps * 32, 0, s>>>(dxb, dyb, xb, wb, rstd, rb, M, c8, accumulate_dx); break;
      case 4: rmsnormBackwardDataVec<4><<<blocks, kWarps * 32, 0, s>>>(dxb, dyb, xb, wb, rstd, rb, M, c8, accumulate_dx); break;
      default: rmsnormBackwardDataVec<0><<<blocks, kWarps * 32, 0, s>>>(dxb, dyb, xb, wb, rstd, rb, M, c8, accumulate_dx);
    }
    TANDEM_CUDA_LAUNCH_CHECK();
    return biasGradientFromPartials(dw, scratch, C, gpu_footprint::kBiasVecChunks, accumulate_dw, dt, s);
  }
  TANDEM_DISPATCH_DT(dt, {
    rmsnormWeightPartialKernel<T><<<dim3(unsigned((C + 31) / 32), gpu_footprint::kBiasRowChunks), dim3(32, 8), 0,
                                    s>>>(scratch, static_cast<const T*>(dy), static_cast<const T*>(x), rstd,
                                         isBf16(rstd_dt), M, C);
    TANDEM_CUDA_LAUNCH_CHECK();
    rmsnormBackwardDataKernel<T><<<unsigned((M + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), rstd,
        isBf16(rstd_dt), M, C, accumulate_dx);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
  biasGradientFromPartials(dw, scratch, C, gpu_footprint::kBiasRowChunks, accumulate_dw, dt, s);
}

namespace {
// The grid of the elementwise SwiGLU kernels (grid-stride loops): with
// partial maxima to write, exactly as many blocks as the cast reads.
unsigned swigluGrid(int64_t work, const float* amax) {
  return amax ? unsigned(gpu_footprint::kFp8AmaxBlocks) : gridFor(work, kThreads);
}
}  // namespace

void swigluForward(void* y, const void* x, int64_t M, int64_t F, DType dt, cudaStream_t s, float* amax) {
  if (dt == DType::BF16 && vec8(F, {y, x})) {
    swigluForwardVec<<<swigluGrid(M * F / 8, amax), kThreads, 0, s>>>(static_cast<uint4*>(y),
                                                                      static_cast<const uint4*>(x), M, F / 8, amax);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, swigluForwardKernel<T><<<swigluGrid(M * F, amax), kThreads, 0, s>>>(
                             static_cast<T*>(y), static_cast<const T*>(x), M, F, amax));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void swigluBackward(void* dx, const void* dy, const void* x, int64_t M, int64_t F, bool accumulate, DType dt,
                    cudaStream_t s, float* amax) {
  if (dt == DType::BF16 && vec8(F, {dx, dy, x})) {
    swigluBackwardVec<<<swigluGrid(M * F / 8, amax), kThreads, 0, s>>>(static_cast<uint4*>(dx),
                                                                       static_cast<const uint4*>(dy),
                                                                       static_cast<const uint4*>(x), M, F / 8,
                                                                       accumulate, amax);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, swigluBackwardKernel<T><<<swigluGrid(M * F, amax), kThreads, 0, s>>>(
                             static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), M, F,
                             accumulate, amax));
  TANDEM_CUDA_LAUNCH_CHECK();
}

namespace {

// The kernels writing FP8 (delayed scaling): grid-stride loops over a
// capped grid, so that few blocks raise the key's amax.
constexpr int64_t kFp8WriterBlocks = 2 * gpu_footprint::kFp8AmaxBlocks;

// The FP8 codes of eight normed values x r w (each as the bf16 kernels
// compute it before their rounding), times scale; m takes their largest |value|.
template <int kFormat>
__device__ __forceinline__ uint2 normedCodes(const uint4& x, const uint4& w, float r, float scale, float& m) {
  float f[8], g[8];
  unpack8(x, f);
  unpack8(w, g);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    f[j] = f[j] * r * g[j];
    m = fmaxf(m, fabsf(f[j]));
  }
  return toFp8x8<kFormat>(f, scale);
}

// A block per row (grid-stride over rows): the sum of squares, then the
// row again (from L1/L2) as codes of x r w, each value as the bf16
// kernels compute it before their rounding.
template <class T, int kFormat>
__global__ void __launch_bounds__(kThreads)
    rmsnormForwardFp8Kernel(uint8_t* y, void* rstd, int rstd_bf16, const T* x, const T* w, int64_t M, int64_t C,
                            bool vec, Fp8Write out) {
  __shared__ float red[32];
  const float scale = *out.scale;
  float m = 0.f;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const T* xr = x + row * C;
    float s = 0.f;
    bool done = false;
    if constexpr (sizeof(T) == 2) {
      if (vec) {
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        for (int64_t v = threadIdx.x; v < C / 8; v += blockDim.x) {
          float f[8];
          unpack8(xv[v], f);
#pragma unroll
          for (int j = 0; j < 8; ++j) s += f[j] * f[j];
        }
        const float r = 1.f / sqrtf(blockSum(s, red) / float(C) + kRmsEps);
        const uint4* wv = reinterpret_cast<const uint4*>(w);
        uint2* yv = reinterpret_cast<uint2*>(y + row * C);
        for (int64_t v = threadIdx.x; v < C / 8; v += blockDim.x)
          yv[v] = normedCodes<kFormat>(xv[v], wv[v], r, scale, m);
        if (threadIdx.x == 0) storeAny(rstd, rstd_bf16, row, r);
        done = true;
      }
    }
    if (done) continue;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = toF(xr[c]);
      s += v * v;
    }
    const float r = 1.f / sqrtf(blockSum(s, red) / float(C) + kRmsEps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = toF(xr[c]) * r * toF(w[c]);
      m = fmaxf(m, fabsf(v));
      y[row * C + c] = toFp8<kFormat>(__fmul_rn(v, scale));
    }
    if (threadIdx.x == 0) storeAny(rstd, rstd_bf16, row, r);
  }
  finishFp8Write(m, scale, out);
}

// rmsnormForwardWide writing the codes of x r w instead (bf16 rows of
// whole vectors, up to wide_rows::kMaxPer per thread): a block per row,
// the row held in registers and read once. The grid-stride kernel above
// read each row twice with one row in flight per block: 78 us per call at
// the 1.1B Llama's 16384 x 2048 on one H100, against 51 for the bf16
// kernel writing twice the bytes.
template <int kPer, int kFormat>
__global__ void __launch_bounds__(kWideThreads)
    rmsnormForwardWideFp8(uint2* y, void* rstd, int rstd_bf16, const uint4* x, const uint4* w, int c8,
                          Fp8Write out) {
  __shared__ float red[kWideThreads / 32];
  const float scale = *out.scale;
  const int64_t row = blockIdx.x;
  uint4 xv[kPer];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!wide_rows::holds(k, c8)) continue;
    xv[k] = x[row * c8 + threadIdx.x + k * kWideThreads];
    float f[8];
    unpack8(xv[k], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) s += f[j] * f[j];
  }
  const float r = 1.f / sqrtf(blockSum(s, red) / float(c8 * 8) + kRmsEps);
  float m = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!wide_rows::holds(k, c8)) continue;
    const int v = threadIdx.x + k * kWideThreads;
    y[row * c8 + v] = normedCodes<kFormat>(xv[k], w[v], r, scale, m);
  }
  if (threadIdx.x == 0) storeAny(rstd, rstd_bf16, row, r);
  finishFp8Write(m, scale, out);
}

// SwiGLU as codes, forward (y rows of F from x rows [gate | up] of 2F) or
// backward (dx rows [d gate | d up], written whole; dy rows of F).
template <class T, int kFormat, bool kBackward>
__global__ void swigluFp8Kernel(uint8_t* out_codes, const T* dy, const T* x, int64_t M, int64_t F, bool vec,
                                Fp8Write out) {
  const float scale = *out.scale;
  float m = 0.f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  bool done = false;
  if constexpr (sizeof(T) == 2) {
    if (vec) {
      const uint4* xv = reinterpret_cast<const uint4*>(x);
      uint2* codes = reinterpret_cast<uint2*>(out_codes);
      const int64_t f8 = F / 8;
      for (int64_t i = first; i < M * f8; i += stride) {
        const int64_t r = i / f8, f = i - r * f8;
        if constexpr (kBackward) {
          float dg[8], du[8];
          swigluGrad8(xv, reinterpret_cast<const uint4*>(dy), r, f8, f, dg, du);
          m = absMax8(absMax8(m, dg), du);
          codes[r * 2 * f8 + f] = toFp8x8<kFormat>(dg, scale);
          codes[r * 2 * f8 + f8 + f] = toFp8x8<kFormat>(du, scale);
        } else {
          float v[8];
          swiglu8(xv, r, f8, f, v);
          m = absMax8(m, v);
          codes[i] = toFp8x8<kFormat>(v, scale);
        }
      }
      done = true;
    }
  }
  if (!done)
    for (int64_t i = first; i < M * F; i += stride) {
      const int64_t r = i / F, f = i - r * F;
      const int64_t gi = r * 2 * F + f, ui = gi + F;
      if constexpr (kBackward) {
        float dg, du;
        swigluGrad(toF(x[gi]), toF(x[ui]), toF(dy[i]), dg, du);
        m = fmaxf(m, fmaxf(fabsf(dg), fabsf(du)));
        out_codes[gi] = toFp8<kFormat>(__fmul_rn(dg, scale));
        out_codes[ui] = toFp8<kFormat>(__fmul_rn(du, scale));
      } else {
        const float v = swiglu(toF(x[gi]), toF(x[ui]));
        m = fmaxf(m, fabsf(v));
        out_codes[i] = toFp8<kFormat>(__fmul_rn(v, scale));
      }
    }
  finishFp8Write(m, scale, out);
}

bool alignedCodes(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

// The same writing both layouts of the codes (the transposed copy a weight
// gradient reads K-major): tiles of y (bf16, F a multiple of 8, M of 4;
// launchFp8Tiles). The backward writes the tiles of d gate and of d up at
// the same place, both from one read of gate, up and dy.
struct SwigluValues {
  static constexpr int kParts = 1, kLoads = 2;
  static constexpr bool kLoops = true;
  const uint4* x;  // rows [gate | up] of 2F
  int64_t f8;      // F / 8
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[2]) const {
    raw[0] = x[r * 2 * f8 + c / 8];
    raw[1] = x[r * 2 * f8 + f8 + c / 8];
  }
  __device__ void compute(int64_t, int64_t, const uint4 (&raw)[2], float (&v)[1][8]) const {
    swiglu8Of(raw[0], raw[1], v[0]);
  }
};

// d gate and d up (parts 0 and 1) from one read of gate, up and dy.
struct SwigluGradValues {
  static constexpr int kParts = 2, kLoads = 3;
  static constexpr bool kLoops = false;
  const uint4* x;   // rows [gate | up] of 2F
  const uint4* dy;  // rows of F
  int64_t f8;
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[3]) const {
    raw[0] = x[r * 2 * f8 + c / 8];
    raw[1] = x[r * 2 * f8 + f8 + c / 8];
    raw[2] = dy[r * f8 + c / 8];
  }
  __device__ void compute(int64_t, int64_t, const uint4 (&raw)[3], float (&v)[2][8]) const {
    swigluGrad8Of(raw[0], raw[1], raw[2], v[0], v[1]);
  }
};

// RMSNorm writing both layouts of its codes: each row's 1 / rms first (a
// warp per row, into the rstd buffer), then tiles of x r w as the SwiGLU
// kernels write theirs (launchFp8Tiles). A block per row cannot write the
// transposed copy (a column of 64 rows is a tile's), and the GEMMs' own
// transpose of the codes afterwards read and wrote them again: 50 us beside
// the norm's 55 at the 1.1B Llama's 16384 x 2048 on one H100.
// A row's 1 / rms by one warp (every lane gets it): rows of c8 16-byte
// vectors, a lane's vectors 32 apart.
__device__ __forceinline__ float warpRowRstd(const uint4* x, int64_t row, int c8, int lane) {
  float s = 0.f;
#pragma unroll 4
  for (int v = lane; v < c8; v += 32) {
    float f[8];
    unpack8(x[row * c8 + v], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) s += f[j] * f[j];
  }
  return 1.f / sqrtf(warpSum(s) / float(c8 * 8) + kRmsEps);
}

__global__ void __launch_bounds__(kThreads) rmsnormRstdKernel(float* rstd, const uint4* x, int64_t M, int c8) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= M) return;
  const int lane = int(threadIdx.x % 32);
  const float r = warpRowRstd(x, row, c8, lane);
  if (lane == 0) rstd[row] = r;
}

struct RmsnormValues {
  static constexpr int kParts = 1, kLoads = 1;
  static constexpr bool kLoops = true;
  const uint4* x;
  const uint4* w;
  const float* rstd;
  int64_t c8;  // C / 8
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[1]) const { raw[0] = x[r * c8 + c / 8]; }
  __device__ void compute(int64_t r, int64_t c, const uint4 (&raw)[1], float (&v)[1][8]) const {
    float g[8];
    unpack8(raw[0], v[0]);
    unpack8(w[c / 8], g);
    const float rr = rstd[r];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[0][j] = v[0][j] * rr * g[j];  // as normedCodes orders it
  }
};

// The same in one kernel, TANDEM_RMSNORM_FP8=blocks (an experiment for
// bench_fp8_writers; the two passes above read x twice from memory, 86 us
// at 16384 x 2048 on one H100 against 48 for the bf16 kernel): a block per
// 32 whole rows, their 1 / rms first (a warp per four rows,
// warpRowRstd), then the rows' 32 x 128 tiles from a second
// read of x that L2 should still hold (two blocks per SM: 2 x 132 x 128 KB
// of rows at width 2048, within the 50 MB L2).
template <int kFormat>
__global__ void __launch_bounds__(kThreads, 2)
    rmsnormForwardFp8RowBlocksKernel(uint8_t* y, uint8_t* yt, const uint4* x, const uint4* w, float* rstd, int64_t M,
                                     int64_t C, Fp8Write out) {
  using Shape = TileShape<32, 128>;
  constexpr int kRowsPerWarp = Shape::kRows / (kThreads / 32);
  __shared__ __align__(16) ByteTileOf<Shape::kRows, Shape::kCols> tile[1];
  const int64_t r0 = int64_t(blockIdx.x) * Shape::kRows;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int c8 = int(C / 8);
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = r0 + warp * kRowsPerWarp + i;
    if (row >= M) break;
    const float r = warpRowRstd(x, row, c8, lane);
    if (lane == 0) rstd[row] = r;
  }
  __syncthreads();  // the block's rows' rstd, written above, visible to all its threads
  const float scale = *out.scale;
  uint8_t* const outs[1] = {y};
  uint8_t* const outs_t[1] = {yt};
  const RmsnormValues values{x, w, rstd, C / 8};
  float m = 0.f;
  for (int64_t c0 = 0; c0 < C; c0 += Shape::kCols)
    m = fmaxf(m, storeTilesBothLayouts<kFormat, kThreads, Shape>(outs, C, outs_t, M, C, r0, c0, scale, tile, values));
  finishFp8Write(m, scale, out);
}

// RMSNorm writing both layouts from one read of x, TANDEM_RMSNORM_FP8=smem:
// a block per kSmemRows rows, copied into shared memory (cp.async: the
// loads hold no registers, so two blocks fit a multiprocessor and one's
// loads run under the other's stores), their 1 / rms by a warp per two
// rows; then the codes, by rows, and through a tile of them in shared
// memory transposed, each column's kSmemRows codes one 16-byte store (half
// a sector: the next block's rows fill the other half in L2). The two
// passes above read x twice (28 + 53 us at 16384 x 2048 on one H100, against
// 45 for the bf16 kernel); a first try holding the rows in registers (128
// per thread, two blocks of 8 warps per multiprocessor) took 91 us, its
// loads idle while the block stored.
constexpr int kSmemRows = 16;
constexpr int kSmemThreads = 256;
constexpr int64_t kSmemMaxCols = 2048;  // 96 KB of shared memory a block: two per multiprocessor

__device__ __forceinline__ uint32_t byteColumn(uint32_t a, uint32_t b, uint32_t c, uint32_t d, int k) {
  // byte k of a, b, c and d, in that order from the low byte
  const uint32_t ab = __byte_perm(a, b, unsigned(k) | (unsigned(4 + k) << 4));
  const uint32_t cd = __byte_perm(c, d, unsigned(k) | (unsigned(4 + k) << 4));
  return __byte_perm(ab, cd, 0x5410);
}

template <int kFormat>
__global__ void __launch_bounds__(kSmemThreads, 2)
    rmsnormForwardFp8SmemKernel(uint8_t* y, uint8_t* yt, const uint4* x, const uint4* w, float* rstd, int64_t M,
                                int64_t C, Fp8Write out) {
  extern __shared__ __align__(16) uint8_t smem[];  // rows [kSmemRows][C] bf16, then codes [kSmemRows][C]
  __shared__ float rs[kSmemRows];
  uint4* rows = reinterpret_cast<uint4*>(smem);
  uint8_t* codes = smem + kSmemRows * C * 2;
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  const int c8 = int(C / 8), chunks = kSmemRows * c8;
  const int64_t r0 = int64_t(blockIdx.x) * kSmemRows;
  for (int i = t; i < chunks; i += kSmemThreads) cpAsync16(smemAddr(rows + i), x + r0 * c8 + i, true);
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads();
  for (int j = warp; j < kSmemRows; j += kSmemThreads / 32) {
    float s = 0.f;
    for (int v = lane; v < c8; v += 32) {
      float f[8];
      unpack8(rows[j * c8 + v], f);
#pragma unroll
      for (int k = 0; k < 8; ++k) s += f[k] * f[k];
    }
    s = warpSum(s);
    if (lane == 0) rs[j] = 1.f / sqrtf(s / float(C) + kRmsEps);
  }
  __syncthreads();
  if (t < kSmemRows) rstd[r0 + t] = rs[t];
  const float scale = *out.scale;
  float m = 0.f;
  for (int i = t; i < chunks; i += kSmemThreads) {
    const int j = i / c8, v = i % c8;
    float f[8], g[8];
    unpack8(rows[i], f);
    unpack8(w[v], g);
    const float r = rs[j];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      f[k] = f[k] * r * g[k];  // as normedCodes orders it
      m = fmaxf(m, fabsf(f[k]));
    }
    const uint2 c = toFp8x8<kFormat>(f, scale);
    *reinterpret_cast<uint2*>(y + (r0 + j) * C + 8 * v) = c;
    *reinterpret_cast<uint2*>(codes + j * C + 8 * v) = c;
  }
  __syncthreads();
  // Four columns at a time: their kSmemRows codes are bytes 0-3 of the
  // rows' words at column 4q.
  for (int q = t; q < 2 * c8; q += kSmemThreads) {
    uint32_t wd[kSmemRows];
#pragma unroll
    for (int j = 0; j < kSmemRows; ++j) wd[j] = *reinterpret_cast<const uint32_t*>(codes + j * C + 4 * q);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint4 col;
      col.x = byteColumn(wd[0], wd[1], wd[2], wd[3], k);
      col.y = byteColumn(wd[4], wd[5], wd[6], wd[7], k);
      col.z = byteColumn(wd[8], wd[9], wd[10], wd[11], k);
      col.w = byteColumn(wd[12], wd[13], wd[14], wd[15], k);
      *reinterpret_cast<uint4*>(yt + (4 * int64_t(q) + k) * M + r0) = col;
    }
  }
  finishFp8Write(m, scale, out);
}

// Whether rmsnormForwardFp8SmemKernel takes [M, C] into yt: whole blocks
// of rows, 16-byte column stores, the rows within its shared memory.
bool rmsnormFp8SmemTakes(int64_t M, int64_t C, const void* yt) {
  return M % kSmemRows == 0 && C <= kSmemMaxCols && reinterpret_cast<uintptr_t>(yt) % 16 == 0;
}

// TANDEM_RMSNORM_FP8: "blocks" or "smem" takes one of the one-kernel
// writers above; unset or "passes" the two passes. Read at each launch, so
// one process can time them all.
enum class RmsnormFp8Path { kPasses, kRowBlocks, kSmem };
RmsnormFp8Path rmsnormFp8Path() {
  switch (envChoice("TANDEM_RMSNORM_FP8", {"passes", "blocks", "smem"})) {
    case 1: return RmsnormFp8Path::kRowBlocks;
    case 2: return RmsnormFp8Path::kSmem;
    default: return RmsnormFp8Path::kPasses;
  }
}

// One row's codes per block (rmsnormForwardFp8 without the transposed copy).
void rmsnormForwardFp8Rows(void* y, void* rstd, DType rstd_dt, const void* x, const void* w, int64_t M, int64_t C,
                           DType dt, const Fp8Write& out, cudaStream_t s) {
  const bool vec = dt == DType::BF16 && vec8(C, {x, w}) && alignedCodes(y);
  if (const int per = vec && M > 0 ? widePer(C / 8) : 0; per > 0) {
    auto* yv = static_cast<uint2*>(y);
    const auto* xv = static_cast<const uint4*>(x);
    const auto* wv = static_cast<const uint4*>(w);
    const int rb = isBf16(rstd_dt), c8 = int(C / 8);
    const unsigned rows = unsigned(M);
    const bool e4m3 = out.format == Fp8Format::E4M3;
#define TANDEM_RMS_FP8_WIDE(P)                                                                                 \
  (e4m3 ? rmsnormForwardWideFp8<P, 0><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8, out)            \
        : rmsnormForwardWideFp8<P, 1><<<rows, kWideThreads, 0, s>>>(yv, rstd, rb, xv, wv, c8, out))
    switch (per) {
      case 1: TANDEM_RMS_FP8_WIDE(1); break;
      case 2: TANDEM_RMS_FP8_WIDE(2); break;
      case 3: TANDEM_RMS_FP8_WIDE(3); break;
      default: TANDEM_RMS_FP8_WIDE(4);
    }
#undef TANDEM_RMS_FP8_WIDE
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  const unsigned grid = unsigned(std::min<int64_t>(std::max<int64_t>(M, 1), kFp8WriterBlocks));
  auto* yc = static_cast<uint8_t*>(y);
  TANDEM_DISPATCH_DT(dt, {
    const T* xt = static_cast<const T*>(x);
    const T* wt = static_cast<const T*>(w);
    if (out.format == Fp8Format::E4M3)
      rmsnormForwardFp8Kernel<T, 0><<<grid, kThreads, 0, s>>>(yc, rstd, isBf16(rstd_dt), xt, wt, M, C, vec, out);
    else
      rmsnormForwardFp8Kernel<T, 1><<<grid, kThreads, 0, s>>>(yc, rstd, isBf16(rstd_dt), xt, wt, M, C, vec, out);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void prepareRmsnormKernels() {
  for (auto kernel : {rmsnormForwardFp8SmemKernel<0>, rmsnormForwardFp8SmemKernel<1>})
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(3 * kSmemRows * kSmemMaxCols)));
}

void rmsnormForwardFp8(void* y, void* yt, void* rstd, DType rstd_dt, const void* x, const void* w, int64_t M,
                       int64_t C, DType dt, const Fp8Write& out, cudaStream_t s) {
  if (yt && rstd_dt == DType::F32 && tiledWriterTakes(dt, M, C, {x, w}, {y, yt})) {
    auto* r = static_cast<float*>(rstd);
    const auto* xv = static_cast<const uint4*>(x);
    const auto* wv = static_cast<const uint4*>(w);
    const RmsnormFp8Path path = rmsnormFp8Path();
    if (path == RmsnormFp8Path::kSmem && rmsnormFp8SmemTakes(M, C, yt)) {
      static const bool raised = (prepareRmsnormKernels(), true);  // where prepareKernels did not run first
      (void)raised;
      const unsigned blocks = unsigned(M / kSmemRows);
      const size_t smem = size_t(3 * kSmemRows * C);  // the rows (bf16) and their codes
      auto* yc = static_cast<uint8_t*>(y);
      auto* ytc = static_cast<uint8_t*>(yt);
      if (out.format == Fp8Format::E4M3)
        rmsnormForwardFp8SmemKernel<0><<<blocks, kSmemThreads, smem, s>>>(yc, ytc, xv, wv, r, M, C, out);
      else
        rmsnormForwardFp8SmemKernel<1><<<blocks, kSmemThreads, smem, s>>>(yc, ytc, xv, wv, r, M, C, out);
      return TANDEM_CUDA_LAUNCH_CHECK();
    }
    if (path == RmsnormFp8Path::kRowBlocks) {
      const unsigned blocks = unsigned((M + 31) / 32);
      auto* yc = static_cast<uint8_t*>(y);
      auto* ytc = static_cast<uint8_t*>(yt);
      if (out.format == Fp8Format::E4M3)
        rmsnormForwardFp8RowBlocksKernel<0><<<blocks, kThreads, 0, s>>>(yc, ytc, xv, wv, r, M, C, out);
      else
        rmsnormForwardFp8RowBlocksKernel<1><<<blocks, kThreads, 0, s>>>(yc, ytc, xv, wv, r, M, C, out);
      return TANDEM_CUDA_LAUNCH_CHECK();
    }
    constexpr int64_t kRowsPerBlock = kThreads / 32;
    rmsnormRstdKernel<<<unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0, s>>>(r, xv, M, int(C / 8));
    TANDEM_CUDA_LAUNCH_CHECK();
    const TileOutputs<1> o{{static_cast<uint8_t*>(y)}, {static_cast<uint8_t*>(yt)}, C};
    launchFp8Tiles<kThreads>(o, M, C, out, RmsnormValues{xv, wv, r, C / 8}, s, "rmsnormForwardFp8");
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  rmsnormForwardFp8Rows(y, rstd, rstd_dt, x, w, M, C, dt, out, s);
  if (yt) transposeBytes(yt, y, M, C, s);  // buffers the tiled kernels do not take
}


void swigluForwardFp8(void* y, void* yt, const void* x, int64_t M, int64_t F, DType dt, const Fp8Write& out,
                      cudaStream_t s) {
  if (yt && tiledWriterTakes(dt, M, F, {x}, {y, yt})) {
    const TileOutputs<1> o{{static_cast<uint8_t*>(y)}, {static_cast<uint8_t*>(yt)}, F};
    launchFp8Tiles<kThreads>(o, M, F, out, SwigluValues{static_cast<const uint4*>(x), F / 8}, s, "swigluForwardFp8");
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  const bool vec = dt == DType::BF16 && vec8(F, {x}) && alignedCodes(y);
  const unsigned grid = gridFor(vec ? M * F / 8 : M * F, kThreads, kFp8WriterBlocks);
  auto* yc = static_cast<uint8_t*>(y);
  TANDEM_DISPATCH_DT(dt, {
    const T* xt = static_cast<const T*>(x);
    if (out.format == Fp8Format::E4M3)
      swigluFp8Kernel<T, 0, false><<<grid, kThreads, 0, s>>>(yc, nullptr, xt, M, F, vec, out);
    else
      swigluFp8Kernel<T, 1, false><<<grid, kThreads, 0, s>>>(yc, nullptr, xt, M, F, vec, out);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
  if (yt) transposeBytes(yt, y, M, F, s);  // shapes the tiled kernel does not take
}

void swigluBackwardFp8(void* dx, void* dxt, const void* dy, const void* x, int64_t M, int64_t F, DType dt,
                       const Fp8Write& out, cudaStream_t s) {
  if (dxt && tiledWriterTakes(dt, M, F, {x, dy}, {dx, dxt})) {
    auto* dxc = static_cast<uint8_t*>(dx);
    auto* dxtc = static_cast<uint8_t*>(dxt);
    // d gate and d up at [M, 2F] (row stride 2F), their transposes one
    // after the other in [2F, M].
    const TileOutputs<2> o{{dxc, dxc + F}, {dxtc, dxtc + F * M}, 2 * F};
    launchFp8Tiles<kThreads>(o, M, F, out,
                             SwigluGradValues{static_cast<const uint4*>(x), static_cast<const uint4*>(dy), F / 8}, s,
                             "swigluBackwardFp8");
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  const bool vec = dt == DType::BF16 && vec8(F, {x, dy}) && alignedCodes(dx);
  const unsigned grid = gridFor(vec ? M * F / 8 : M * F, kThreads, kFp8WriterBlocks);
  auto* dxc = static_cast<uint8_t*>(dx);
  TANDEM_DISPATCH_DT(dt, {
    const T* dyt = static_cast<const T*>(dy);
    const T* xt = static_cast<const T*>(x);
    if (out.format == Fp8Format::E4M3)
      swigluFp8Kernel<T, 0, true><<<grid, kThreads, 0, s>>>(dxc, dyt, xt, M, F, vec, out);
    else
      swigluFp8Kernel<T, 1, true><<<grid, kThreads, 0, s>>>(dxc, dyt, xt, M, F, vec, out);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
  if (dxt) transposeBytes(dxt, dx, M, 2 * F, s);
}

namespace {

// The 16-byte kernels: bf16, each half of a head a whole number of vectors.
bool vecGrouped(int64_t C, int64_t H, DType dt, std::initializer_list<const void*> ptrs) {
  return dt == DType::BF16 && (C / H) % 16 == 0 && vec8(8, ptrs);
}

void checkGrouped(int64_t C, int64_t H, int64_t KV) {
  if (H <= 0 || KV <= 0 || C % H != 0 || H % KV != 0 || (C / H) % 2 != 0)
    throw CudaError("grouped attention: hidden, heads and key/value heads do not form whole groups of even-width "
                    "heads");
}

}  // namespace

void expandGroupedQkv(void* full, const void* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV, DType dt,
                      cudaStream_t s) {
  checkGrouped(C, H, KV);
  if (vecGrouped(C, H, dt, {full, qkv})) {
    expandGroupedQkvVec<<<gridFor(B * Tn * KV * (C / H / 16), kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(full), static_cast<const uint4*>(qkv), B * Tn, int(Tn), int(H), int(KV), int(C / H));
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  const int64_t n = B * Tn * (C / H / 2);
  TANDEM_DISPATCH_DT(dt, expandGroupedQkvKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(full), static_cast<const T*>(qkv), B * Tn, int(Tn), int(H), int(KV),
                             int(C / H)));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void foldGroupedQkv(void* dqkv, const void* dfull, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV,
                    bool accumulate, DType dt, cudaStream_t s) {
  checkGrouped(C, H, KV);
  if (vecGrouped(C, H, dt, {dqkv, dfull})) {
    foldGroupedQkvVec<<<gridFor(B * Tn * KV * (C / H / 16), kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(dqkv), static_cast<const uint4*>(dfull), B * Tn, int(Tn), int(H), int(KV), int(C / H),
        accumulate);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  const int64_t n = B * Tn * (C / H / 2);
  TANDEM_DISPATCH_DT(dt, foldGroupedQkvKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(dqkv), static_cast<const T*>(dfull), B * Tn, int(Tn), int(H), int(KV),
                             int(C / H), accumulate));
  TANDEM_CUDA_LAUNCH_CHECK();
}

namespace {

// Whether the grouped layout goes to the tensor-core kernels as it is: the
// rule the scratch was counted by (gpu_footprint::groupedAttentionOnTensorCores,
// from the plan without a GPU), so the other path never runs in a scratch
// sized for this one.
bool groupedOnTensorCores(int64_t C, int64_t H, DType dt, std::initializer_list<const void*> ptrs) {
  if (!gpu_footprint::groupedAttentionOnTensorCores(C, H, int64_t(dtypeSize(dt)))) return false;
  if (!attentionTensorCoreEligible(C, H, dt))
    throw CudaError("grouped attention: heads " + std::to_string(C / H) +
                    " wide need the tensor-core kernels' sm_90a code on this GPU");
  if (!vecGrouped(C, H, dt, ptrs))
    throw CudaError("grouped attention: its buffers must start on 16-byte boundaries");
  return true;
}

// The rotated queries and keys (rotateGroupedQkVec) at qk, V read from qkv,
// the angles for the backward's epilogues.
TcAttention groupedInputs(const void* qk, const void* qkv, const float2* angles, int64_t C, int64_t H, int64_t KV) {
  const int D = int(C / H), R = int(H / KV);
  TcAttention in;
  in.qk = qk;
  in.v = qkv;
  in.rope = angles;
  in.layout.group = R;
  in.layout.qk = {int((H + KV) * D), (R + 1) * D, R * D, 0};
  in.layout.v = {int((H + 2 * KV) * D), (R + 2) * D, 0, (R + 1) * D};
  in.layout.grad = {int((H + 2 * KV) * D), (R + 2) * D, R * D, (R + 1) * D};
  return in;
}

// Scratch of the tensor-core path: the rotated queries and keys, then the
// angles, then (backward) the kernels' delta.
struct RotatedScratch {
  void* qk;
  float2* angles;
  float* delta;
};
RotatedScratch rotatedScratch(void* scratch, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV) {
  std::byte* base = static_cast<std::byte*>(scratch);
  const int64_t qk_bytes = gpu_footprint::rotatedQkBytes(B, Tn, C, H, KV);
  return {base, reinterpret_cast<float2*>(base + qk_bytes),
          reinterpret_cast<float*>(base + qk_bytes + gpu_footprint::ropeAngleBytes(Tn, C / H))};
}

// The angles, then the rotated queries and keys.
void rotateGroupedQk(const RotatedScratch& dst, const void* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H,
                     int64_t KV, cudaStream_t s) {
  const int D = int(C / H);
  ropeAnglesKernel<<<gridFor(Tn * (D / 2), kThreads), kThreads, 0, s>>>(dst.angles, int(Tn), D);
  TANDEM_CUDA_LAUNCH_CHECK();
  rotateGroupedQkVec<<<gridFor(B * Tn * KV * (D / 16), kThreads), kThreads, 0, s>>>(
      static_cast<uint4*>(dst.qk), static_cast<const uint4*>(qkv), dst.angles, B * Tn, int(Tn), int(H), int(KV), D);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void groupedAttentionForward(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn, int64_t C,
                             int64_t H, int64_t KV, DType dt, void* scratch, cudaStream_t s) {
  checkGrouped(C, H, KV);
  if (groupedOnTensorCores(C, H, dt, {qkv, scratch})) {
    const RotatedScratch rs = rotatedScratch(scratch, B, Tn, C, H, KV);
    rotateGroupedQk(rs, qkv, B, Tn, C, H, KV, s);
    return attentionForwardTc(out, lse, lse_dt, groupedInputs(rs.qk, qkv, rs.angles, C, H, KV), B, Tn, C, H, s);
  }
  expandGroupedQkv(scratch, qkv, B, Tn, C, H, KV, dt, s);
  attentionForward(out, lse, lse_dt, scratch, B, Tn, C, H, dt, s);
}

void groupedAttentionBackward(void* dqkv, const void* dout, const void* qkv, const void* out, const void* lse,
                              DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV, bool accumulate,
                              DType dt, void* scratch, cudaStream_t s) {
  checkGrouped(C, H, KV);
  std::byte* base = static_cast<std::byte*>(scratch);
  if (groupedOnTensorCores(C, H, dt, {dqkv, qkv, scratch})) {
    // The rotated queries and keys again (the forward's copy is not kept),
    // then the kernels write the grouped gradient directly: dK and dV summed
    // over each group in registers, dQ and dK rotated back by the angles.
    const RotatedScratch rs = rotatedScratch(scratch, B, Tn, C, H, KV);
    rotateGroupedQk(rs, qkv, B, Tn, C, H, KV, s);
    return attentionBackwardTc(dqkv, dout, groupedInputs(rs.qk, qkv, rs.angles, C, H, KV), out, lse, lse_dt,
                               rs.delta, nullptr, B, Tn, C, H, accumulate, s);
  }
  const int64_t expanded = gpu_footprint::groupedQkvBytes(B, Tn, C, int64_t(dtypeSize(dt)));
  void* full = base;
  void* dfull = base + expanded;
  float* attention_scratch = reinterpret_cast<float*>(base + 2 * expanded);
  expandGroupedQkv(full, qkv, B, Tn, C, H, KV, dt, s);
  attentionBackward(dfull, nullptr, dout, full, out, lse, lse_dt, B, Tn, C, H, /*accumulate=*/false, false, dt,
                    attention_scratch, s);
  foldGroupedQkv(dqkv, dfull, B, Tn, C, H, KV, accumulate, dt, s);
}

void groupedAttentionBackwardFp8(void* dqkv, void* dqkv_t, const void* dout, const void* qkv, const void* out,
                                 const void* lse, DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H,
                                 int64_t KV, DType dt, const Fp8Write& w, void* scratch, cudaStream_t s) {
  checkGrouped(C, H, KV);
  if (!dqkv_t || !groupedOnTensorCores(C, H, dt, {dqkv, dqkv_t, qkv, scratch}))
    throw CudaError("grouped attention backward: an FP8 gradient is written in both layouts by the tensor-core "
                    "kernels, which take bf16 heads 64 or 128 wide");
  const RotatedScratch rs = rotatedScratch(scratch, B, Tn, C, H, KV);
  rotateGroupedQk(rs, qkv, B, Tn, C, H, KV, s);
  Fp8GradOut o;
  o.rows = static_cast<uint8_t*>(dqkv);
  o.cols = static_cast<uint8_t*>(dqkv_t);
  o.tokens = B * Tn;
  o.w = w;
  attentionBackwardTc(nullptr, dout, groupedInputs(rs.qk, qkv, rs.angles, C, H, KV), out, lse, lse_dt, rs.delta,
                      nullptr, B, Tn, C, H, /*accumulate=*/false, s, o);
}

}  // namespace tandem::cuda
