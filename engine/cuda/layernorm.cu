// LayerNorm forward and backward, eps = 1e-5 (engine/cpu/kernels.h).
// One warp per row. The backward writes dw/db partial sums per warp into
// scratch and reduces them in a second kernel: deterministic, no atomics.
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpsPerBlock = 8;
constexpr int kBwdBlocks = 264;  // fixed (2 per H200 SM): the reduction order must not depend on M
constexpr int kBwdWarps = kBwdBlocks * kWarpsPerBlock;

template <class T>
__global__ void layernormForwardKernel(T* y, void* mean, int mean_bf16, void* rstd, int rstd_bf16,
                                       const T* x, const T* w, const T* b, int64_t M, int64_t C) {
  int lane = threadIdx.x & 31;
  int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= M) return;
  const T* xr = x + row * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += toF(xr[c]);
  float mu = warpSum(s) / float(C);
  float q = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    float d = toF(xr[c]) - mu;
    q += d * d;
  }
  float var = warpSum(q) / float(C);
  float rs = rsqrtf(var + kEps);
  T* yr = y + row * C;
  for (int64_t c = lane; c < C; c += 32)
    yr[c] = fromF<T>((toF(xr[c]) - mu) * rs * toF(w[c]) + toF(b[c]));
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

// Column sums of the per-warp partials in two fixed-order stages, wide
// enough to use the whole GPU: stage 1 sums kGroups slices of the partial
// rows per column block, stage 2 sums the kGroups results in order.
constexpr int kGroups = 32;

__global__ void layernormPartialSumKernel(float* stage, const float* partial_dw, const float* partial_db,
                                          int64_t C) {
  __shared__ float sw[8][33], sb[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int per = (kBwdWarps + kGroups - 1) / kGroups;
  const int j0 = blockIdx.y * per, j1 = min(kBwdWarps, j0 + per);
  float aw = 0.f, ab = 0.f;
  if (c < C)
    for (int j = j0 + threadIdx.y; j < j1; j += 8) {
      aw += partial_dw[j * C + c];
      ab += partial_db[j * C + c];
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float tw = 0.f, tb = 0.f;
  for (int j = 0; j < 8; ++j) {
    tw += sw[j][threadIdx.x];
    tb += sb[j][threadIdx.x];
  }
  stage[blockIdx.y * C + c] = tw;
  stage[(kGroups + blockIdx.y) * C + c] = tb;
}

template <class T>
__global__ void layernormParamReduceKernel(T* dw, T* db, const float* stage, int64_t C, bool accumulate) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float tw = 0.f, tb = 0.f;
  for (int g = 0; g < kGroups; ++g) {
    tw += stage[g * C + c];
    tb += stage[(kGroups + g) * C + c];
  }
  if (accumulate) {
    tw += toF(dw[c]);
    tb += toF(db[c]);
  }
  dw[c] = fromF<T>(tw);
  db[c] = fromF<T>(tb);
}

}  // namespace

void layernormForward(void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* x,
                      const void* w, const void* b, int64_t M, int64_t C, DType dt,
                      cudaStream_t s) {
  unsigned grid = unsigned((M + kWarpsPerBlock - 1) / kWarpsPerBlock);
  TANDEM_DISPATCH_DT(dt, layernormForwardKernel<T><<<grid, kWarpsPerBlock * 32, 0, s>>>(
                             static_cast<T*>(y), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt),
                             static_cast<const T*>(x), static_cast<const T*>(w),
                             static_cast<const T*>(b), M, C));
  TANDEM_CUDA_LAUNCH_CHECK();
}

int64_t layernormScratchBytes(int64_t C) { return (int64_t(kBwdWarps) + kGroups) * C * 2 * sizeof(float); }

void layernormBackward(void* dx, void* dw, void* db, const void* dy, const void* x, const void* w,
                       const void* mean, DType mean_dt, const void* rstd, DType rstd_dt, int64_t M,
                       int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt, float* scratch,
                       cudaStream_t s) {
  float* pdw = scratch;
  float* pdb = scratch + int64_t(kBwdWarps) * C;
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
    float* stage = scratch + 2 * int64_t(kBwdWarps) * C;
    layernormPartialSumKernel<<<dim3(unsigned((C + 31) / 32), kGroups), dim3(32, 8), 0, s>>>(stage, pdw, pdb, C);
    TANDEM_CUDA_LAUNCH_CHECK();
    layernormParamReduceKernel<T><<<gridFor(C, 256), 256, 0, s>>>(static_cast<T*>(dw), static_cast<T*>(db), stage,
                                                                  C, accumulate_dw);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
