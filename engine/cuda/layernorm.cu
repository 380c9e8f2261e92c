// LayerNorm forward and backward, eps = kLayerNormEps (engine/numerics/constants.h).
// One warp per row. The backward writes dw/db partial sums per warp into
// scratch and reduces them in a second kernel: deterministic, no atomics.
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/fp8_write.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/wide_rows.cuh"
#include "engine/numerics/constants.h"

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace tandem::cuda {
namespace {

constexpr float kEps = float(kLayerNormEps);
// Fixed launch shapes (2 backward blocks per H200 SM): the reduction order
// must not depend on M. They size the scratch (engine/memory/gpu_footprint.h).
constexpr int kWarpsPerBlock = gpu_footprint::kLayernormWarpsPerBlock;
constexpr int kBwdBlocks = gpu_footprint::kLayernormBwdBlocks;
constexpr int kBwdWarps = gpu_footprint::kLayernormBwdWarps;

template <class T>
__global__ void layernormForwardKernel(T* y, void* mean, int mean_bf16, void* rstd, int rstd_bf16,
                                       const T* x, const T* w, const T* b, int64_t M, int64_t C,
                                       const T* x2, T* sum) {
  int lane = threadIdx.x & 31;
  int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= M) return;
  const T* xr = x + row * C;
  const T* x2r = x2 ? x2 + row * C : nullptr;
  // With x2: the input is x + x2 rounded to T, as the add kernel writes it
  // (written to `sum` too), so fused and separate kernels agree bit for bit.
  auto in = [&](int64_t c) { return x2r ? toF(fromF<T>(toF(xr[c]) + toF(x2r[c]))) : toF(xr[c]); };
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = in(c);
    if (sum) sum[row * C + c] = fromF<T>(v);
    s += v;
  }
  float mu = warpSum(s) / float(C);
  float q = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    float d = in(c) - mu;
    q += d * d;
  }
  float var = warpSum(q) / float(C);
  float rs = rsqrtf(var + kEps);
  T* yr = y + row * C;
  for (int64_t c = lane; c < C; c += 32)
    yr[c] = fromF<T>((in(c) - mu) * rs * toF(w[c]) + toF(b[c]));
  if (lane == 0) {
    if (mean) storeAny(mean, mean_bf16, row, mu);
    if (rstd) storeAny(rstd, rstd_bf16, row, rs);
  }
}

template <class T>
__global__ void layernormBackwardKernel(T* dx, float* partial_dw, float* partial_db, const T* dy,
                                        const T* x, const T* w, const void* mean, int mean_bf16,
                                        const void* rstd, int rstd_bf16, int64_t M, int64_t C,
                                        bool accumulate_dx) {
  int lane = threadIdx.x & 31;
  int64_t warp = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  float* pdw = partial_dw + warp * C;
  float* pdb = partial_db + warp * C;
  for (int64_t c = lane; c < C; c += 32) {
    pdw[c] = 0.f;
    pdb[c] = 0.f;
  }
  for (int64_t row = warp; row < M; row += kBwdWarps) {
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    float mu = loadAny(mean, mean_bf16, row);
    float rs = loadAny(rstd, rstd_bf16, row);
    float sum_dn = 0.f, sum_dn_xhat = 0.f;
    for (int64_t c = lane; c < C; c += 32) {
      float xhat = (toF(xr[c]) - mu) * rs;
      float g = toF(dyr[c]);
      float dn = g * toF(w[c]);
      sum_dn += dn;
      sum_dn_xhat += dn * xhat;
      pdw[c] += g * xhat;
      pdb[c] += g;
    }
    float a = warpSum(sum_dn) / float(C);
    float bb = warpSum(sum_dn_xhat) / float(C);
    T* dxr = dx + row * C;
    for (int64_t c = lane; c < C; c += 32) {
      float xhat = (toF(xr[c]) - mu) * rs;
      float dn = toF(dyr[c]) * toF(w[c]);
      float v = rs * (dn - a - xhat * bb);
      if (accumulate_dx) v += toF(dxr[c]);
      dxr[c] = fromF<T>(v);
    }
  }
}

// Same math with each lane's share of dw/db kept in registers (C <= 32 *
// kPerLane): one write of the partial rows at the end instead of a
// read-modify-write per row.
template <class T, int kPerLane>
__global__ void layernormBackwardRegKernel(T* dx, float* partial_dw, float* partial_db, const T* dy,
                                           const T* x, const T* w, const void* mean, int mean_bf16,
                                           const void* rstd, int rstd_bf16, int64_t M, int64_t C,
                                           bool accumulate_dx) {
  int lane = threadIdx.x & 31;
  int64_t warp = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  float aw[kPerLane], ab[kPerLane], wv[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    aw[k] = ab[k] = 0.f;
    int64_t c = lane + 32 * k;
    wv[k] = c < C ? toF(w[c]) : 0.f;
  }
  for (int64_t row = warp; row < M; row += kBwdWarps) {
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    float mu = loadAny(mean, mean_bf16, row);
    float rs = loadAny(rstd, rstd_bf16, row);
    float xh[kPerLane], g[kPerLane];
    float sum_dn = 0.f, sum_dn_xhat = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      int64_t c = lane + 32 * k;
      xh[k] = 0.f, g[k] = 0.f;
      if (c < C) {
        xh[k] = (toF(xr[c]) - mu) * rs;
        g[k] = toF(dyr[c]);
      }
      float dn = g[k] * wv[k];
      sum_dn += dn;
      sum_dn_xhat += dn * xh[k];
      aw[k] += g[k] * xh[k];
      ab[k] += g[k];
    }
    float a = warpSum(sum_dn) / float(C);
    float bb = warpSum(sum_dn_xhat) / float(C);
    T* dxr = dx + row * C;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      int64_t c = lane + 32 * k;
      if (c < C) {
        float v = rs * (g[k] * wv[k] - a - xh[k] * bb);
        if (accumulate_dx) v += toF(dxr[c]);
        dxr[c] = fromF<T>(v);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    int64_t c = lane + 32 * k;
    if (c < C) {
      partial_dw[warp * C + c] = aw[k];
      partial_db[warp * C + c] = ab[k];
    }
  }
}

// 16-byte vector paths for rows whose width is a multiple of the vector
// (8 bf16 or 4 fp32 elements) and at most 32 elements per lane: each lane
// keeps its columns in registers, so a row is read once and written once.
template <class T>
struct Vec16 {
  static constexpr int kElems = 16 / int(sizeof(T));
  __device__ __forceinline__ static uint4 raw(const T* p) { return *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ static void unpack(const uint4& u, float (&f)[kElems]) {
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < kElems; ++i) f[i] = toF(e[i]);
  }
  __device__ __forceinline__ static void load(const T* p, float (&f)[kElems]) { unpack(raw(p), f); }
  __device__ __forceinline__ static void store(T* p, const float (&f)[kElems]) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < kElems; ++i) e[i] = fromF<T>(f[i]);
    *reinterpret_cast<uint4*>(p) = u;
  }
};

template <class T, int kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    layernormForwardVecKernel(T* y, void* mean, int mean_bf16, void* rstd, int rstd_bf16, const T* x, const T* w,
                              const T* b, int64_t M, int64_t C, const T* x2, T* sum) {
  constexpr int E = Vec16<T>::kElems;
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= M) return;
  const int nvec = int(C / E);
  // Both inputs of the whole row are requested before the first store: the
  // compiler cannot tell that `sum` does not alias them, so loading inside
  // the store loop costs a memory round trip per vector.
  uint4 u[kVec], u2[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int c = (lane + 32 * k) * E;
    const bool valid = lane + 32 * k < nvec;
    u[k] = valid ? Vec16<T>::raw(x + row * C + c) : make_uint4(0, 0, 0, 0);
    u2[k] = valid && x2 ? Vec16<T>::raw(x2 + row * C + c) : make_uint4(0, 0, 0, 0);
  }
  float v[kVec][E];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int c = (lane + 32 * k) * E;
    Vec16<T>::unpack(u[k], v[k]);
    if (lane + 32 * k < nvec) {
      if (x2) {  // the residual add, rounded to T as the add kernel rounds it
        float v2[E];
        Vec16<T>::unpack(u2[k], v2);
#pragma unroll
        for (int i = 0; i < E; ++i) v[k][i] = toF(fromF<T>(v[k][i] + v2[i]));
        Vec16<T>::store(sum + row * C + c, v[k]);
      }
#pragma unroll
      for (int i = 0; i < E; ++i) s += v[k][i];
    }
  }
  const float mu = warpSum(s) / float(C);
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    if (lane + 32 * k < nvec)
#pragma unroll
      for (int i = 0; i < E; ++i) q += (v[k][i] - mu) * (v[k][i] - mu);
  const float rs = rsqrtf(warpSum(q) / float(C) + kEps);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int c = (lane + 32 * k) * E;
    if (lane + 32 * k < nvec) {
      float wv[E], bv[E], out[E];
      Vec16<T>::load(w + c, wv);
      Vec16<T>::load(b + c, bv);
#pragma unroll
      for (int i = 0; i < E; ++i) out[i] = (v[k][i] - mu) * rs * wv[i] + bv[i];
      Vec16<T>::store(y + row * C + c, out);
    }
  }
  if (lane == 0) {
    if (mean) storeAny(mean, mean_bf16, row, mu);
    if (rstd) storeAny(rstd, rstd_bf16, row, rs);
  }
}

// Rows up to 24 elements per lane keep each lane's dw/db partial sums in
// registers (two blocks per SM); wider rows keep them in shared memory, one
// slice per warp, so registers hold only the row and its gradient.
template <class T, int kVec>
constexpr bool kLnAccInSmem = kVec * Vec16<T>::kElems > 24;

// Rows of [kWarpsPerBlock][C] floats the backward's partial parameter sums
// take in shared memory: one for the block sum in register mode; in shared
// mode one per summed parameter (dw, and db unless kRms).
template <class T, int kVec, bool kRms>
constexpr int kLnAccRows = kLnAccInSmem<T, kVec> && !kRms ? 2 : 1;

// Shared memory of the backward: the partial sums' rows (kLnAccRows); with
// kBias one more [kWarpsPerBlock][C] for the residual gradient's column
// sums (shared in either mode: registers are full in register mode).
template <class T, int kVec, bool kBias, bool kRms = false>
constexpr size_t lnBackwardSmemBytes(int64_t C) {
  return size_t(kLnAccRows<T, kVec, kRms> + (kBias ? 1 : 0)) * kWarpsPerBlock * size_t(C) * sizeof(float);
}

// One block's warps stride over the rows; the warps' dw/db partial sums are
// added over the block in a fixed order, so the scratch holds one partial row
// per block (kBwdBlocks rows). kBias: also the column sums of dx's contents
// before the add (the bias gradient of the layer whose output gradient is
// the residual gradient; engine/passes/bias_grad.h) into partial_dr; needs
// accumulate_dx. kParams off: dx alone (no parameter sums; 79 registers for
// GPT-2's rows, three blocks per SM), for bench_layernorm_bwd. kRms: the
// RMSNorm backward (the Llama family): no mean, no bias, so xhat = x rstd,
// dx = rstd (dy w - xhat mean(dy w xhat)) and only dw is summed.
template <class T, int kVec, bool kBias, bool kParams = true, bool kRms = false>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kParams ? (kLnAccInSmem<T, kVec> ? 1 : 2) : 3)
    layernormBackwardVecKernel(T* dx, float* partial_dw, float* partial_db, float* partial_dr, const T* dy,
                               const T* x, const T* w, const void* mean, int mean_bf16, const void* rstd,
                               int rstd_bf16, int64_t M, int64_t C, bool accumulate_dx) {
  constexpr int E = Vec16<T>::kElems;
  constexpr bool kSmemAcc = kLnAccInSmem<T, kVec>;
  constexpr int kRegVec = kSmemAcc ? 1 : kVec;
  constexpr bool kEarlyPrev = sizeof(T) < 4;
  extern __shared__ float block_sum[];
  const int lane = threadIdx.x & 31, warp_in_block = threadIdx.x >> 5;
  const int64_t warp = blockIdx.x * int64_t(kWarpsPerBlock) + warp_in_block;
  const int nvec = int(C / E);
  // Shared mode: each warp's dw (and db) partial sums, element i of vector v
  // at i * nvec + v like warp_dr below (in row order a lane's eight columns
  // put the lanes 32 bytes apart: 8-way bank conflicts on every add).
  float* warp_dw = block_sum + int64_t(warp_in_block) * C;
  float* warp_db = block_sum + int64_t(kWarpsPerBlock + warp_in_block) * C;  // not with kRms
  float* dr_sums = block_sum + int64_t(kLnAccRows<T, kVec, kRms>) * kWarpsPerBlock * C;  // kBias: [warp][C]
  float* warp_dr = dr_sums + int64_t(warp_in_block) * C;
  // The weights are re-read per row (L1 hits) rather than held: registers
  // go to the row and the partial sums.
  float aw[kRegVec][E], ab[kRegVec][E];
#pragma unroll
  for (int k = 0; k < kRegVec; ++k)
#pragma unroll
    for (int i = 0; i < E; ++i) aw[k][i] = ab[k][i] = 0.f;
  if constexpr (kSmemAcc) {
    for (int64_t c = lane; c < C; c += 32) {
      warp_dw[c] = 0.f;
      if constexpr (!kRms) warp_db[c] = 0.f;
    }
    __syncwarp();
  }
  if constexpr (kBias) {
    for (int64_t c = lane; c < C; c += 32) warp_dr[c] = 0.f;
    __syncwarp();
  }
  // With the parameter sums the grid is fixed (kBwdBlocks: the sums' order
  // must not depend on M); without them, one row per warp.
  const int64_t row_stride = kParams ? int64_t(kBwdWarps) : int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = warp; row < M; row += row_stride) {
    // Everything the row needs is requested before any of it is used, the
    // residual gradient it adds to included: one memory round trip per row
    // (loading dx after the row's sums made it two: GPT-2 124M's layernorm
    // backward took 1.25 ms per step on one H200, now 0.89; docs/gpu-executor.md).
    // The row stays packed in registers and is unpacked once per pass. fp32
    // rows are twice the registers, so there the residual gradient is still
    // loaded late (early, it spills).
    const float mu = kRms ? 0.f : loadAny(mean, mean_bf16, row);
    const float rs = loadAny(rstd, rstd_bf16, row);
    uint4 ux[kVec], ug[kVec], up[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int c = (lane + 32 * k) * E;
      const bool valid = lane + 32 * k < nvec;
      ux[k] = valid ? Vec16<T>::raw(x + row * C + c) : make_uint4(0, 0, 0, 0);
      ug[k] = valid ? Vec16<T>::raw(dy + row * C + c) : make_uint4(0, 0, 0, 0);
      up[k] = kEarlyPrev && valid && accumulate_dx ? Vec16<T>::raw(dx + row * C + c) : make_uint4(0, 0, 0, 0);
    }
    float sum_dn = 0.f, sum_dn_xhat = 0.f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int c = (lane + 32 * k) * E;
      const bool valid = lane + 32 * k < nvec;
      float xh[E], g[E], wv[E];
      Vec16<T>::unpack(ux[k], xh);
      Vec16<T>::unpack(ug[k], g);
      if (valid)
        Vec16<T>::load(w + c, wv);
      else
#pragma unroll
        for (int i = 0; i < E; ++i) wv[i] = 0.f;
#pragma unroll
      for (int i = 0; i < E; ++i) {
        xh[i] = (xh[i] - mu) * rs;
        const float dn = g[i] * wv[i];
        sum_dn += dn;
        sum_dn_xhat += dn * xh[i];
        if constexpr (!kSmemAcc && kParams) {
          aw[k][i] += g[i] * xh[i];
          if constexpr (!kRms) ab[k][i] += g[i];
        }
      }
      if constexpr (kSmemAcc && kParams) {
        if (valid)
#pragma unroll
          for (int i = 0; i < E; ++i) {
            warp_dw[i * nvec + c / E] += g[i] * xh[i];
            if constexpr (!kRms) warp_db[i * nvec + c / E] += g[i];
          }
      }
    }
    const float a = kRms ? 0.f : warpSum(sum_dn) / float(C);
    const float bb = warpSum(sum_dn_xhat) / float(C);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int c = (lane + 32 * k) * E;
      if (lane + 32 * k < nvec) {
        float xh[E], g[E], prev[E], wv[E], out[E];
        Vec16<T>::unpack(ux[k], xh);
        Vec16<T>::unpack(ug[k], g);
        if (!kEarlyPrev && accumulate_dx) up[k] = Vec16<T>::raw(dx + row * C + c);
        Vec16<T>::unpack(up[k], prev);  // zeros unless accumulating
        // Element i of vector v sits at i * nvec + v: for each i the lanes
        // touch consecutive words (row order, c + i, put lanes 32 bytes
        // apart: 8-way bank conflicts, and GPT-2's layernorm backward took
        // 0.36 ms longer per step).
        if constexpr (kBias)
#pragma unroll
          for (int i = 0; i < E; ++i) warp_dr[i * nvec + c / E] += prev[i];
        Vec16<T>::load(w + c, wv);
#pragma unroll
        for (int i = 0; i < E; ++i) out[i] = rs * (g[i] * wv[i] - a - (xh[i] - mu) * rs * bb) + prev[i];
        Vec16<T>::store(dx + row * C + c, out);
      }
    }
  }
  if constexpr (!kParams) return;
  // Block sum of the warps' partials, warps added in a fixed order.
  if constexpr (kBias) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const int64_t at = (c % E) * nvec + c / E;  // the layout above
      float t = 0.f;
      for (int j = 0; j < kWarpsPerBlock; ++j) t += dr_sums[j * C + at];
      partial_dr[blockIdx.x * C + c] = t;
    }
  }
  if constexpr (kSmemAcc) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const int64_t at = (c % E) * nvec + c / E;  // the layout above
      float tw = 0.f, tb = 0.f;
      for (int j = 0; j < kWarpsPerBlock; ++j) {
        tw += block_sum[j * C + at];
        if constexpr (!kRms) tb += block_sum[(kWarpsPerBlock + j) * C + at];
      }
      partial_dw[blockIdx.x * C + c] = tw;
      if constexpr (!kRms) partial_db[blockIdx.x * C + c] = tb;
    }
  } else {
    for (int pass = 0; pass < (kRms ? 1 : 2); ++pass) {
#pragma unroll
      for (int k = 0; k < kRegVec; ++k)
        if (lane + 32 * k < nvec)
#pragma unroll
          for (int i = 0; i < E; ++i)
            block_sum[warp_in_block * C + (lane + 32 * k) * E + i] = pass == 0 ? aw[k][i] : ab[k][i];
      __syncthreads();
      float* out = pass == 0 ? partial_dw : partial_db;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float t = 0.f;
        for (int j = 0; j < kWarpsPerBlock; ++j) t += block_sum[j * C + c];
        out[blockIdx.x * C + c] = t;
      }
      __syncthreads();
    }
  }
}

// Column sums of the partial rows (one per block, or per warp on the scalar
// paths) into dw and db, in one fixed order: 32 slices of rows per column
// block, then the slices in order. One kernel: a two-stage version cost a
// second launch per layernorm backward (about 2.5 us each, 25 per GPT-2 step).
constexpr int kSlices = 32;

// dr / partial_dr: the bias gradient a kBias backward summed, or null.
template <class T>
__global__ void __launch_bounds__(32 * kSlices)
    layernormParamGradKernel(T* dw, T* db, T* dr, const float* partial_dw, const float* partial_db,
                             const float* partial_dr, int64_t C, int rows, bool accumulate) {
  __shared__ float sw[kSlices][33], sb[kSlices][33], sr[kSlices][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int per = (rows + kSlices - 1) / kSlices;
  const int j0 = threadIdx.y * per, j1 = min(rows, j0 + per);
  float aw = 0.f, ab = 0.f, ar = 0.f;
  if (c < C) {
#pragma unroll 4
    for (int j = j0; j < j1; ++j) {
      aw += partial_dw[j * C + c];
      if (db) ab += partial_db[j * C + c];
    }
    if (dr)
#pragma unroll 4
      for (int j = j0; j < j1; ++j) ar += partial_dr[j * C + c];
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  sr[threadIdx.y][threadIdx.x] = ar;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float tw = 0.f, tb = 0.f, tr = 0.f;
  for (int j = 0; j < kSlices; ++j) {
    tw += sw[j][threadIdx.x];
    tb += sb[j][threadIdx.x];
    tr += sr[j][threadIdx.x];
  }
  if (accumulate) {
    tw += toF(dw[c]);
    if (db) tb += toF(db[c]);
    if (dr) tr += toF(dr[c]);
  }
  dw[c] = fromF<T>(tw);
  if (db) db[c] = fromF<T>(tb);
  if (dr) dr[c] = fromF<T>(tr);
}

// ---- bf16 rows too wide for a warp (GPT widths above 2048) ---------------
// The warp-per-row kernels above hold at most 8 vectors per lane; wider rows
// took the scalar kernel, whose partial sums are a read-modify-write of
// global memory per element and row: 2.9 ms for 16384 rows of 3072 on one
// H200 (140 GB/s), where the RMSNorm's block-per-row kernel moves 2.5 TB/s.
// Here, as there, a block per row (wide_rows.cuh); the backward's grid is a
// fixed kWideChunks blocks: each column's partial sums of dy xhat and dy are
// one thread's registers (no reduction across threads), written once per
// block and summed over the blocks in a fixed order by
// layernormParamGradKernel.
constexpr int kWideThreads = wide_rows::kThreads;
constexpr int kWideChunks = gpu_footprint::kBiasVecChunks;

// The pair (a, b) summed over the block in one fixed order; `red` holds
// kWideThreads / 32 pairs and is not reused before the block's next barrier
// (the caller alternates two by row parity).
__device__ __forceinline__ float2 blockSumPair(float a, float b, float2* red) {
  a = warpSum(a);
  b = warpSum(b);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = make_float2(a, b);
  __syncthreads();
  float2 t = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kWideThreads / 32; ++w) t.x += red[w].x, t.y += red[w].y;
  return t;
}

// grid: one block per row. The forward of the same rows (the scalar kernel
// it replaces read the row three times: 470 us for 32768 rows of 4096 on
// an H200, this one 306 us on the slower H100).
// x2, sum: the residual add before it (sum = x + x2, rounded to bf16 as the
// add kernel rounds it), or null.
template <int kPer>
__global__ void __launch_bounds__(kWideThreads)
    layernormForwardWide(uint4* y, void* mean, int mean_bf16, void* rstd, int rstd_bf16, const uint4* x,
                         const uint4* w, const uint4* b, int c8, const uint4* x2, uint4* sum) {
  __shared__ float2 red[2][kWideThreads / 32];
  const int64_t row = blockIdx.x;
  auto valid = [&](int k) { return wide_rows::holds(k, c8); };
  float v[kPer][8];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!valid(k)) continue;
    const int64_t at = row * c8 + threadIdx.x + k * kWideThreads;
    unpack8(x[at], v[k]);
    if (x2) {
      float v2[8];
      unpack8(x2[at], v2);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[k][j] = __bfloat162float(__float2bfloat16_rn(v[k][j] + v2[j]));
      sum[at] = pack8(v[k]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) s += v[k][j];
  }
  const float C = float(c8) * 8.f;
  const float mu = blockSumPair(s, 0.f, red[0]).x / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (valid(k))
#pragma unroll
      for (int j = 0; j < 8; ++j) q += (v[k][j] - mu) * (v[k][j] - mu);
  const float rs = rsqrtf(blockSumPair(q, 0.f, red[1]).x / C + kEps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!valid(k)) continue;
    const int c = threadIdx.x + k * kWideThreads;
    float wf[8], bf[8], out[8];
    unpack8(w[c], wf);
    unpack8(b[c], bf);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = (v[k][j] - mu) * rs * wf[j] + bf[j];
    y[row * c8 + c] = pack8(out);
  }
  if (threadIdx.x == 0) {
    if (mean) storeAny(mean, mean_bf16, row, mu);
    if (rstd) storeAny(rstd, rstd_bf16, row, rs);
  }
}

// dx may alias dy: a row's vectors are read into registers before any is
// written, each by the thread that writes it.
template <int kPer>
__global__ void __launch_bounds__(kWideThreads)
    layernormBackwardWide(uint4* dx, float* partial_dw, float* partial_db, const uint4* dy, const uint4* x,
                          const uint4* w, const void* mean, int mean_bf16, const void* rstd, int rstd_bf16,
                          int64_t M, int c8, bool accumulate_dx) {
  __shared__ float2 red[2][kWideThreads / 32];
  const auto [begin, end] = wide_rows::rowRange(M);
  const int64_t C = int64_t(c8) * 8;
  auto valid = [&](int k) { return wide_rows::holds(k, c8); };
  float aw[kPer][8], ab[kPer][8];
#pragma unroll
  for (int k = 0; k < kPer; ++k)
#pragma unroll
    for (int j = 0; j < 8; ++j) aw[k][j] = ab[k][j] = 0.f;
  uint4 g[kPer], xv[kPer];
  if (begin < end) wide_rows::loadRow(dy, x, begin, c8, g, xv);
  for (int64_t row = begin; row < end; ++row) {
    uint4 g_next[kPer], x_next[kPer];
    if (row + 1 < end) wide_rows::loadRow(dy, x, row + 1, c8, g_next, x_next);
    const float mu = loadAny(mean, mean_bf16, row), rs = loadAny(rstd, rstd_bf16, row);
    float sum_dn = 0.f, sum_dn_xhat = 0.f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!valid(k)) continue;
      float gf[8], xf[8], wf[8];
      unpack8(g[k], gf);
      unpack8(xv[k], xf);
      unpack8(w[threadIdx.x + k * kWideThreads], wf);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float xhat = (xf[j] - mu) * rs, dn = gf[j] * wf[j];
        sum_dn += dn;
        sum_dn_xhat += dn * xhat;
        aw[k][j] += gf[j] * xhat;
        ab[k][j] += gf[j];
      }
    }
    const float2 sums = blockSumPair(sum_dn, sum_dn_xhat, red[row & 1]);
    const float a = sums.x / float(C), bb = sums.y / float(C);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!valid(k)) continue;
      float gf[8], xf[8], wf[8], out[8];
      unpack8(g[k], gf);
      unpack8(xv[k], xf);
      unpack8(w[threadIdx.x + k * kWideThreads], wf);
      uint4* at = dx + row * c8 + threadIdx.x + k * kWideThreads;
      float prev[8];
      if (accumulate_dx) unpack8(*at, prev);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float xhat = (xf[j] - mu) * rs;
        out[j] = rs * (gf[j] * wf[j] - a - xhat * bb);
        if (accumulate_dx) out[j] += prev[j];
      }
      *at = pack8(out);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) g[k] = g_next[k], xv[k] = x_next[k];
  }
  const int64_t base = int64_t(blockIdx.x) * C;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!valid(k)) continue;
    const int64_t c = base + int64_t(threadIdx.x + k * kWideThreads) * 8;
    float4* dw4 = reinterpret_cast<float4*>(partial_dw + c);
    float4* db4 = reinterpret_cast<float4*>(partial_db + c);
    dw4[0] = make_float4(aw[k][0], aw[k][1], aw[k][2], aw[k][3]);
    dw4[1] = make_float4(aw[k][4], aw[k][5], aw[k][6], aw[k][7]);
    db4[0] = make_float4(ab[k][0], ab[k][1], ab[k][2], ab[k][3]);
    db4[1] = make_float4(ab[k][4], ab[k][5], ab[k][6], ab[k][7]);
  }
}

// The wide kernel's vectors per thread for bf16 rows of C elements, or 0
// where it does not apply (width, alignment, more than wide_rows::kMaxPer).
int wideVectorsPerThread(int64_t C, DType dt, std::initializer_list<const void*> ptrs) {
  if (dt != DType::BF16 || !vec8(C, ptrs)) return 0;
  return wide_rows::vectorsPerThread(C / 8);
}

// Which kernels take bf16 rows both kinds can: TANDEM_LAYERNORM=wide sends
// every such row to the block-per-row kernels, =warp keeps rows up to 2048
// on the warp-per-row ones (bench_layernorm_bwd times the two side by side);
// unset, each pass takes its default (layernormForwardAny, layernormBackward).
// Read at each launch, so that one process can time both.
enum class RowKernels { Default, Warp, Wide };
RowKernels rowKernelsChosen() {
  switch (envChoice("TANDEM_LAYERNORM", {"warp", "wide"})) {
    case 0: return RowKernels::Warp;
    case 1: return RowKernels::Wide;
    default: return RowKernels::Default;
  }
}
bool wideForEveryWidth() { return rowKernelsChosen() == RowKernels::Wide; }

// LayerNorm writing both layouts of its FP8 codes: each row's mean and
// 1 / std first (a warp per row, two passes over the row as the bf16
// kernels take them, into the mean and rstd buffers), then tiles of
// (x - mean) rstd w + b (launchFp8Tiles), so the weight gradient
// reads the transposed copy instead of transposing the codes itself.
__global__ void __launch_bounds__(256) layernormStatsKernel(float* mean, float* rstd, const uint4* x, int64_t M,
                                                            int c8) {
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;
  if (row >= M) return;
  const int lane = int(threadIdx.x % 32);
  float s = 0.f;
  for (int v = lane; v < c8; v += 32) {
    float f[8];
    unpack8(x[row * c8 + v], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) s += f[j];
  }
  const float mu = warpSum(s) / float(c8 * 8);
  float q = 0.f;
  for (int v = lane; v < c8; v += 32) {
    float f[8];
    unpack8(x[row * c8 + v], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) q += (f[j] - mu) * (f[j] - mu);
  }
  const float rs = rsqrtf(warpSum(q) / float(c8 * 8) + kEps);
  if (lane == 0) mean[row] = mu, rstd[row] = rs;
}

struct LayernormValues {
  static constexpr int kParts = 1, kLoads = 1;
  static constexpr bool kLoops = false;
  const uint4* x;
  const uint4* w;
  const uint4* b;
  const float* mean;
  const float* rstd;
  int64_t c8;
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[1]) const { raw[0] = x[r * c8 + c / 8]; }
  __device__ void compute(int64_t r, int64_t c, const uint4 (&raw)[1], float (&v)[1][8]) const {
    float wv[8], bv[8];
    unpack8(raw[0], v[0]);
    unpack8(w[c / 8], wv);
    unpack8(b[c / 8], bv);
    const float mu = mean[r], rs = rstd[r];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[0][j] = (v[0][j] - mu) * rs * wv[j] + bv[j];  // as the bf16 kernels order it
  }
};

}  // namespace

// Vectors of 16 bytes per lane a row of C elements needs on the vector
// paths, or 0 when the row does not qualify (width, alignment, register cap).
static int vectorsPerLane(int64_t C, DType dt, int max_vec, std::initializer_list<const void*> ptrs) {
  const int elems = dt == DType::BF16 ? 8 : 4;
  if (C % elems != 0) return 0;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  const int64_t vec = (C / elems + 31) / 32;
  return vec <= max_vec ? int(vec) : 0;
}

// Calls KERNEL<T, V> for the run-time vector count V in 1..8.
#define TANDEM_DISPATCH_VEC(V, ...)                                                    \
  switch (V) {                                                                       \
    case 1: { constexpr int kV = 1; __VA_ARGS__; } break;                            \
    case 2: { constexpr int kV = 2; __VA_ARGS__; } break;                            \
    case 3: { constexpr int kV = 3; __VA_ARGS__; } break;                            \
    case 4: { constexpr int kV = 4; __VA_ARGS__; } break;                            \
    case 5: { constexpr int kV = 5; __VA_ARGS__; } break;                            \
    case 6: { constexpr int kV = 6; __VA_ARGS__; } break;                            \
    case 7: { constexpr int kV = 7; __VA_ARGS__; } break;                            \
    default: { constexpr int kV = 8; __VA_ARGS__; } break;                           \
  }

// Launches the vector backward for kV vectors per lane (pdr: the bias
// gradient's partial sums, or null).
template <class T, int kV>
void launchBackwardVec(T* dx, float* pdw, float* pdb, float* pdr, const T* dy, const T* x, const T* w,
                       const void* mean, int mean_bf16, const void* rstd, int rstd_bf16, int64_t M, int64_t C,
                       bool accumulate_dx, cudaStream_t s) {
  if (pdr)
    layernormBackwardVecKernel<T, kV, true>
        <<<kBwdBlocks, kWarpsPerBlock * 32, lnBackwardSmemBytes<T, kV, true>(C), s>>>(
            dx, pdw, pdb, pdr, dy, x, w, mean, mean_bf16, rstd, rstd_bf16, M, C, accumulate_dx);
  else
    layernormBackwardVecKernel<T, kV, false>
        <<<kBwdBlocks, kWarpsPerBlock * 32, lnBackwardSmemBytes<T, kV, false>(C), s>>>(
            dx, pdw, pdb, nullptr, dy, x, w, mean, mean_bf16, rstd, rstd_bf16, M, C, accumulate_dx);
}

template <class T, int kV, bool kBias, bool kRms = false>
void allowBackwardSmemOne() {
  const int64_t widest = kV * 32 * Vec16<T>::kElems;
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(layernormBackwardVecKernel<T, kV, kBias, true, kRms>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(lnBackwardSmemBytes<T, kV, kBias, kRms>(widest))));
}
template <class T, int kV>
void allowBackwardSmem() {
  allowBackwardSmemOne<T, kV, false>();
  allowBackwardSmemOne<T, kV, true>();
  allowBackwardSmemOne<T, kV, false, true>();
}

static void layernormForwardAny(void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* x,
                               const void* x2, void* sum, const void* w, const void* b, int64_t M, int64_t C,
                               DType dt, cudaStream_t s) {
  unsigned grid = unsigned((M + kWarpsPerBlock - 1) / kWarpsPerBlock);
  // Up to 64 elements per lane: bf16 rows up to 2048 wide, fp32 up to 1024.
  const int vec = vectorsPerLane(C, dt, 8, {y, x, w, b, x2, sum});
  const int wide = wideVectorsPerThread(C, dt, {y, x, w, b, x2, sum});
  if (vec > 0 && !(wide > 0 && wideForEveryWidth())) {
    TANDEM_DISPATCH_DT(dt, TANDEM_DISPATCH_VEC(vec,
                                               layernormForwardVecKernel<T, kV><<<grid, kWarpsPerBlock * 32, 0, s>>>(
                                                   static_cast<T*>(y), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt),
                                                   static_cast<const T*>(x), static_cast<const T*>(w),
                                                   static_cast<const T*>(b), M, C, static_cast<const T*>(x2),
                                                   static_cast<T*>(sum))));
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  if (const int per = wide; per > 0 && M > 0) {
    auto* yv = static_cast<uint4*>(y);
    auto* xv = static_cast<const uint4*>(x);
    auto* wv = static_cast<const uint4*>(w);
    auto* bv = static_cast<const uint4*>(b);
    auto* x2v = static_cast<const uint4*>(x2);
    auto* sv = static_cast<uint4*>(sum);
    const int mb = isBf16(mean_dt), rb = isBf16(rstd_dt), c8 = int(C / 8);
    const unsigned rows = unsigned(M);
    switch (per) {
      case 1: layernormForwardWide<1><<<rows, kWideThreads, 0, s>>>(yv, mean, mb, rstd, rb, xv, wv, bv, c8, x2v, sv); break;
      case 2: layernormForwardWide<2><<<rows, kWideThreads, 0, s>>>(yv, mean, mb, rstd, rb, xv, wv, bv, c8, x2v, sv); break;
      case 3: layernormForwardWide<3><<<rows, kWideThreads, 0, s>>>(yv, mean, mb, rstd, rb, xv, wv, bv, c8, x2v, sv); break;
      default: layernormForwardWide<4><<<rows, kWideThreads, 0, s>>>(yv, mean, mb, rstd, rb, xv, wv, bv, c8, x2v, sv);
    }
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, layernormForwardKernel<T><<<grid, kWarpsPerBlock * 32, 0, s>>>(
                             static_cast<T*>(y), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt),
                             static_cast<const T*>(x), static_cast<const T*>(w),
                             static_cast<const T*>(b), M, C, static_cast<const T*>(x2), static_cast<T*>(sum)));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void layernormForward(void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* x,
                      const void* w, const void* b, int64_t M, int64_t C, DType dt,
                      cudaStream_t s) {
  layernormForwardAny(y, mean, mean_dt, rstd, rstd_dt, x, nullptr, nullptr, w, b, M, C, dt, s);
}

void addLayernormForward(void* sum, void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* a,
                         const void* a2, const void* w, const void* b, int64_t M, int64_t C, DType dt,
                         cudaStream_t s) {
  layernormForwardAny(y, mean, mean_dt, rstd, rstd_dt, a, a2, sum, w, b, M, C, dt, s);
}

void layernormBackward(void* dx, void* dw, void* db, void* dbias, const void* dy, const void* x, const void* w,
                       const void* mean, DType mean_dt, const void* rstd, DType rstd_dt, int64_t M,
                       int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt, float* scratch,
                       cudaStream_t s) {
  if (dbias && !accumulate_dx)
    throw CudaError("layernormBackward: a bias gradient is summed from the residual gradient dx adds to, "
                    "so dx must accumulate");
  float* pdw = scratch;
  float* pdb = scratch + int64_t(kBwdWarps) * C;
  float* pdr = dbias ? scratch + 2 * int64_t(kBwdWarps) * C : nullptr;
  // Up to 8 vectors per lane (bf16 rows up to 2048 wide, fp32 up to 1024);
  // wider or unaligned rows take the block-per-row or the scalar kernels
  // below.
  const int vec = vectorsPerLane(C, dt, 8, {dx, dy, x, w});
  const int wide = wideVectorsPerThread(C, dt, {dx, dy, x, w});
  // By default bf16 rows wider than 768 (more than 3 vectors per lane, where
  // the warp kernel's parameter sums go through shared memory) take the
  // block-per-row kernels: at 16384 rows on one H100 they take 11%, 22%, 31%
  // and 33% less time at widths 1024, 1280, 1600 and 2048, and twice as long
  // at 768 (bench_layernorm_bwd, docs/benchmarks.md).
  const RowKernels chosen = rowKernelsChosen();
  const bool take_wide = wide > 0 && (chosen == RowKernels::Wide || (chosen == RowKernels::Default && vec > 3));
  if (vec > 0 && !take_wide) {
    TANDEM_DISPATCH_DT(dt, {
      TANDEM_DISPATCH_VEC(vec, launchBackwardVec<T, kV>(static_cast<T*>(dx), pdw, pdb, pdr, static_cast<const T*>(dy),
                                                        static_cast<const T*>(x), static_cast<const T*>(w), mean,
                                                        isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C, accumulate_dx,
                                                        s));
      TANDEM_CUDA_LAUNCH_CHECK();
      layernormParamGradKernel<T><<<unsigned((C + 31) / 32), dim3(32, kSlices), 0, s>>>(
          static_cast<T*>(dw), static_cast<T*>(db), static_cast<T*>(dbias), pdw, pdb, pdr, C, kBwdBlocks,
          accumulate_dw);
    });
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  // The wide and scalar paths: the bias gradient from dx's contents first,
  // on its own (it uses the scratch before the partial sums do).
  if (dbias) biasGradient(dbias, dx, M, C, accumulate_dw, dt, scratch, s);
  if (const int per = wide; per > 0) {
    auto* dxv = static_cast<uint4*>(dx);
    auto* dyv = static_cast<const uint4*>(dy);
    auto* xv = static_cast<const uint4*>(x);
    auto* wv = static_cast<const uint4*>(w);
    const int mb = isBf16(mean_dt), rb = isBf16(rstd_dt), c8 = int(C / 8);
    float* wide_db = scratch + int64_t(kWideChunks) * C;
    switch (per) {
      case 1: layernormBackwardWide<1><<<kWideChunks, kWideThreads, 0, s>>>(dxv, scratch, wide_db, dyv, xv, wv, mean, mb, rstd, rb, M, c8, accumulate_dx); break;
      case 2: layernormBackwardWide<2><<<kWideChunks, kWideThreads, 0, s>>>(dxv, scratch, wide_db, dyv, xv, wv, mean, mb, rstd, rb, M, c8, accumulate_dx); break;
      case 3: layernormBackwardWide<3><<<kWideChunks, kWideThreads, 0, s>>>(dxv, scratch, wide_db, dyv, xv, wv, mean, mb, rstd, rb, M, c8, accumulate_dx); break;
      default: layernormBackwardWide<4><<<kWideChunks, kWideThreads, 0, s>>>(dxv, scratch, wide_db, dyv, xv, wv, mean, mb, rstd, rb, M, c8, accumulate_dx);
    }
    TANDEM_CUDA_LAUNCH_CHECK();
    layernormParamGradKernel<bf16><<<unsigned((C + 31) / 32), dim3(32, kSlices), 0, s>>>(
        static_cast<bf16*>(dw), static_cast<bf16*>(db), nullptr, scratch, wide_db, nullptr, C, kWideChunks,
        accumulate_dw);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, {
    if (C <= 32 * 24)  // GPT-2 small and medium widths: fewer live registers
      layernormBackwardRegKernel<T, 24><<<kBwdBlocks, kWarpsPerBlock * 32, 0, s>>>(
          static_cast<T*>(dx), pdw, pdb, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(w), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
          accumulate_dx);
    else if (C <= 32 * 32)
      layernormBackwardRegKernel<T, 32><<<kBwdBlocks, kWarpsPerBlock * 32, 0, s>>>(
          static_cast<T*>(dx), pdw, pdb, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(w), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
          accumulate_dx);
    else
      layernormBackwardKernel<T><<<kBwdBlocks, kWarpsPerBlock * 32, 0, s>>>(
          static_cast<T*>(dx), pdw, pdb, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(w), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
          accumulate_dx);
    TANDEM_CUDA_LAUNCH_CHECK();
    layernormParamGradKernel<T><<<unsigned((C + 31) / 32), dim3(32, kSlices), 0, s>>>(
        static_cast<T*>(dw), static_cast<T*>(db), static_cast<T*>(nullptr), pdw, pdb, nullptr, C, kBwdWarps,
        accumulate_dw);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

// The dx-only backward for kV vectors per lane: one row per warp.
template <class T, int kV>
void launchBackwardDataOnly(T* dx, const T* dy, const T* x, const T* w, const void* mean, int mean_bf16,
                            const void* rstd, int rstd_bf16, int64_t M, int64_t C, bool accumulate_dx, cudaStream_t s) {
  const unsigned grid = unsigned((M + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernormBackwardVecKernel<T, kV, false, false><<<grid, kWarpsPerBlock * 32, 0, s>>>(
      dx, nullptr, nullptr, nullptr, dy, x, w, mean, mean_bf16, rstd, rstd_bf16, M, C, accumulate_dx);
}

void layernormBackwardDataOnly(void* dx, const void* dy, const void* x, const void* w, const void* mean,
                               DType mean_dt, const void* rstd, DType rstd_dt, int64_t M, int64_t C,
                               bool accumulate_dx, DType dt, cudaStream_t s) {
  const int vec = vectorsPerLane(C, dt, 3, {dx, dy, x, w});
  if (vec == 0)
    throw CudaError("layernormBackwardDataOnly: rows of at most 3 vectors per lane on the vector path only");
  TANDEM_DISPATCH_DT(dt, {
    auto* out = static_cast<T*>(dx);
    auto* g = static_cast<const T*>(dy);
    auto* in = static_cast<const T*>(x);
    auto* wt = static_cast<const T*>(w);
    if (vec == 1)
      launchBackwardDataOnly<T, 1>(out, g, in, wt, mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
                                   accumulate_dx, s);
    else if (vec == 2)
      launchBackwardDataOnly<T, 2>(out, g, in, wt, mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
                                   accumulate_dx, s);
    else
      launchBackwardDataOnly<T, 3>(out, g, in, wt, mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
                                   accumulate_dx, s);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

bool rmsnormBackwardFused(void* dx, void* dw, const void* dy, const void* x, const void* w, const void* rstd,
                          DType rstd_dt, int64_t M, int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt,
                          float* scratch, cudaStream_t s) {
  const int vec = vectorsPerLane(C, dt, 8, {dx, dy, x, w});
  if (vec == 0) return false;
  // TANDEM_LAYERNORM=wide: rows the block-per-row kernel takes go there
  // (bench_layernorm_bwd times both; the layernorm's default moved there
  // beyond 768 after that measurement, RMSNorm's has not been measured yet).
  if (wideForEveryWidth() && wideVectorsPerThread(C, dt, {dx, dy, x, w}) > 0) return false;
  TANDEM_DISPATCH_DT(dt, {
    TANDEM_DISPATCH_VEC(vec, layernormBackwardVecKernel<T, kV, false, true, true>
                                 <<<kBwdBlocks, kWarpsPerBlock * 32, lnBackwardSmemBytes<T, kV, false, true>(C), s>>>(
                                     static_cast<T*>(dx), scratch, nullptr, nullptr, static_cast<const T*>(dy),
                                     static_cast<const T*>(x), static_cast<const T*>(w), nullptr, 0, rstd,
                                     isBf16(rstd_dt), M, C, accumulate_dx));
    TANDEM_CUDA_LAUNCH_CHECK();
    layernormParamGradKernel<T><<<unsigned((C + 31) / 32), dim3(32, kSlices), 0, s>>>(
        static_cast<T*>(dw), nullptr, nullptr, scratch, nullptr, nullptr, C, kBwdBlocks, accumulate_dw);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
  return true;
}

void prepareLayernormKernels() {
  // Shared-memory accumulation needs more than the default 48 KB per block
  // for the wide rows.
  allowBackwardSmem<bf16, 4>();
  allowBackwardSmem<bf16, 5>();
  allowBackwardSmem<bf16, 6>();
  allowBackwardSmem<bf16, 7>();
  allowBackwardSmem<bf16, 8>();
  allowBackwardSmem<float, 7>();
  allowBackwardSmem<float, 8>();
}

void layernormForwardFp8(void* y, void* yt, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* x,
                         const void* w, const void* b, int64_t M, int64_t C, DType dt, const Fp8Write& out,
                         cudaStream_t s) {
  if (!yt || mean_dt != DType::F32 || rstd_dt != DType::F32 || !tiledWriterTakes(dt, M, C, {x, w, b}, {y, yt}))
    throw CudaError("layernormForwardFp8: writes both layouts from bf16 rows of whole 16-byte vectors (columns a "
                    "multiple of 8, rows of 4) with fp32 statistics");
  auto* mu = static_cast<float*>(mean);
  auto* rs = static_cast<float*>(rstd);
  const auto* xv = static_cast<const uint4*>(x);
  layernormStatsKernel<<<unsigned((M + 7) / 8), 256, 0, s>>>(mu, rs, xv, M, int(C / 8));
  TANDEM_CUDA_LAUNCH_CHECK();
  const TileOutputs<1> o{{static_cast<uint8_t*>(y)}, {static_cast<uint8_t*>(yt)}, C};
  launchFp8Tiles<256>(o, M, C, out,
                      LayernormValues{xv, static_cast<const uint4*>(w), static_cast<const uint4*>(b), mu, rs, C / 8}, s,
                      "layernormForwardFp8");
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
