// LayerNorm forward and backward, eps = 1e-5 (engine/cpu/kernels.h).
// One warp per row. The backward writes dw/db partial sums per warp into
// scratch and reduces them in a second kernel: deterministic, no atomics.
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpsPerBlock = 8;
constexpr int kBwdBlocks = 128;  // fixed: the reduction order must not depend on M
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

template <class T>
__global__ void layernormParamReduceKernel(T* dw, T* db, const float* partial_dw,
                                           const float* partial_db, int64_t C, bool accumulate) {
  int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float sw = 0.f, sb = 0.f;
  for (int j = 0; j < kBwdWarps; ++j) {
    sw += partial_dw[j * C + c];
    sb += partial_db[j * C + c];
  }
  if (accumulate) {
    sw += toF(dw[c]);
    sb += toF(db[c]);
  }
  dw[c] = fromF<T>(sw);
  db[c] = fromF<T>(sb);
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

int64_t layernormScratchBytes(int64_t C) { return int64_t(kBwdWarps) * C * 2 * sizeof(float); }

void layernormBackward(void* dx, void* dw, void* db, const void* dy, const void* x, const void* w,
                       const void* mean, DType mean_dt, const void* rstd, DType rstd_dt, int64_t M,
                       int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt, float* scratch,
                       cudaStream_t s) {
  float* pdw = scratch;
  float* pdb = scratch + int64_t(kBwdWarps) * C;
  TANDEM_DISPATCH_DT(dt, {
    layernormBackwardKernel<T><<<kBwdBlocks, kWarpsPerBlock * 32, 0, s>>>(
        static_cast<T*>(dx), pdw, pdb, static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(w), mean, isBf16(mean_dt), rstd, isBf16(rstd_dt), M, C,
        accumulate_dx);
    TANDEM_CUDA_LAUNCH_CHECK();
    layernormParamReduceKernel<T><<<gridFor(C, 256), 256, 0, s>>>(
        static_cast<T*>(dw), static_cast<T*>(db), pdw, pdb, C, accumulate_dw);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
