// Causal multi-head attention, flash style: scores are never stored; the
// forward keeps only the log-sum-exp per query row, the backward rebuilds the
// probabilities from it. One thread per query row (forward, dq) or key row
// (dk, dv), key/query tiles staged in shared memory, fp32 arithmetic.
// Every output element is written by exactly one thread: deterministic.
#include <algorithm>
#include <cmath>

#include "engine/cuda/attention_tc.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gemm_gelu.h"
#include "engine/cuda/kernels.h"
#include "engine/plan/gpu_support.h"

namespace tandem::cuda {
namespace {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // rows of the other operand staged per iteration

// Keys and values [k0, k0 + kTile) of head h into shared memory (zeros past
// Tn), the block's threads striding over the tile: the forward and the dQ
// kernel stream the same tiles.
template <class T, int D>
__device__ __forceinline__ void stageKeyValueTile(float (&ks)[kTile][D], float (&vs)[kTile][D], const T* base, int k0,
                                                  int Tn, int64_t row_stride, int C, int h) {
  for (int e = threadIdx.x; e < kTile * D; e += kRows) {
    const int r = e / D, d = e % D, key = k0 + r;
    float kv = 0.f, vv = 0.f;
    if (key < Tn) {
      kv = toF(base[key * row_stride + C + h * D + d]);
      vv = toF(base[key * row_stride + 2 * C + h * D + d]);
    }
    ks[r][d] = kv;
    vs[r][d] = vv;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kRows) attentionForwardKernel(T* out, void* lse, int lse_bf16,
                                                                const T* qkv, int Tn, int C, int H,
                                                                float scale) {
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  int b = blockIdx.z, h = blockIdx.y;
  int i = blockIdx.x * kRows + threadIdx.x;
  int64_t row_stride = 3 * int64_t(C);
  const T* base = qkv + int64_t(b) * Tn * row_stride;
  float q[D], o[D];
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < D; ++d) q[d] = toF(base[i * row_stride + h * D + d]) * scale;
  }
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  int kv_end = min(Tn, (blockIdx.x + 1) * kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    stageKeyValueTile<T, D>(ks, vs, base, k0, Tn, row_stride, C, h);
    __syncthreads();
    if (i >= Tn || k0 > i) continue;
    float s[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float acc = 0.f;
#pragma unroll
      for (int d = 0; d < D; ++d) acc += q[d] * ks[j][d];
      s[j] = (k0 + j <= i) ? acc : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    float new_m = fmaxf(m, tile_max);
    float corr = expf(m - new_m);
    l *= corr;
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] *= corr;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      float p = expf(s[j] - new_m);
      l += p;
#pragma unroll
      for (int d = 0; d < D; ++d) o[d] += p * vs[j][d];
    }
    m = new_m;
  }
  if (i < Tn) {
    float inv = 1.f / l;
    T* orow = out + (int64_t(b) * Tn + i) * C + h * D;
#pragma unroll
    for (int d = 0; d < D; ++d) orow[d] = fromF<T>(o[d] * inv);
    storeAny(lse, lse_bf16, (int64_t(b) * H + h) * Tn + i, m + logf(l));
  }
}

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d]. A group of D / kVec
// consecutive lanes reads one head row in 16-byte pieces (coalesced) and adds
// its partial sums in a fixed shuffle order.
template <class T, int D>
__global__ void attentionDeltaKernel(float* delta, const T* dout, const T* out, int B, int Tn, int C, int H) {
  constexpr int kVec = 16 / int(sizeof(T)), kLanes = D / kVec;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "lanes per row");
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = idx / kLanes;  // (b * Tn + i) * H + h
  const int part = int(idx % kLanes);
  const bool active = row < int64_t(B) * Tn * H;
  float acc = 0.f;
  if (active) {
    const int64_t off = (row / H) * C + (row % H) * D + part * kVec;
    const uint4 gv = *reinterpret_cast<const uint4*>(dout + off);
    const uint4 ov = *reinterpret_cast<const uint4*>(out + off);
    const T* ge = reinterpret_cast<const T*>(&gv);
    const T* oe = reinterpret_cast<const T*>(&ov);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc += toF(ge[e]) * toF(oe[e]);
  }
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (active && part == 0) {
    const int64_t bi = row / H;
    const int h = int(row % H), b = int(bi / Tn), i = int(bi % Tn);
    delta[(int64_t(b) * H + h) * Tn + i] = acc;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kRows) attentionDqKernel(T* dqkv, const T* dout, const T* qkv,
                                                           const void* lse, int lse_bf16,
                                                           const float* delta, int Tn, int C,
                                                           int H, float scale, bool accumulate) {
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  int b = blockIdx.z, h = blockIdx.y;
  int i = blockIdx.x * kRows + threadIdx.x;
  int64_t row_stride = 3 * int64_t(C);
  const T* base = qkv + int64_t(b) * Tn * row_stride;
  float q[D], g[D], dq[D];
  float li = 0.f, di = 0.f;
  if (i < Tn) {
    int64_t orow = (int64_t(b) * Tn + i) * C + h * D;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      q[d] = toF(base[i * row_stride + h * D + d]) * scale;
      g[d] = toF(dout[orow + d]);
    }
    li = loadAny(lse, lse_bf16, (int64_t(b) * H + h) * Tn + i);
    di = delta[(int64_t(b) * H + h) * Tn + i];
  }
#pragma unroll
  for (int d = 0; d < D; ++d) dq[d] = 0.f;
  int kv_end = min(Tn, (blockIdx.x + 1) * kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    stageKeyValueTile<T, D>(ks, vs, base, k0, Tn, row_stride, C, h);
    __syncthreads();
    if (i >= Tn || k0 > i) continue;
    int jmax = min(kTile, i - k0 + 1);
    for (int j = 0; j < jmax; ++j) {
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        s += q[d] * ks[j][d];
        dp += g[d] * vs[j][d];
      }
      float ds = expf(s - li) * (dp - di);
#pragma unroll
      for (int d = 0; d < D; ++d) dq[d] += ds * ks[j][d];
    }
  }
  if (i < Tn) {
    T* row = dqkv + (int64_t(b) * Tn + i) * (3 * int64_t(C)) + h * D;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      float v = dq[d] * scale;
      if (accumulate) v += toF(row[d]);
      row[d] = fromF<T>(v);
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kRows) attentionDkvKernel(T* dqkv, const T* dout, const T* qkv,
                                                            const void* lse, int lse_bf16,
                                                            const float* delta, int Tn, int C,
                                                            int H, float scale, bool accumulate) {
  __shared__ float qs[kTile][D];
  __shared__ float gs[kTile][D];
  __shared__ float vown[kRows][D + 1];  // padded: each thread reads its own row
  __shared__ float ls[kTile], ds_[kTile];
  int b = blockIdx.z, h = blockIdx.y;
  int j = blockIdx.x * kRows + threadIdx.x;
  int64_t row_stride = 3 * int64_t(C);
  const T* base = qkv + int64_t(b) * Tn * row_stride;
  float k[D], dk[D], dv[D];
  if (j < Tn) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      k[d] = toF(base[j * row_stride + C + h * D + d]);
      vown[threadIdx.x][d] = toF(base[j * row_stride + 2 * C + h * D + d]);
    }
  }
#pragma unroll
  for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0.f;
  int64_t stat = (int64_t(b) * H + h) * Tn;
  for (int q0 = blockIdx.x * kRows; q0 < Tn; q0 += kTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * D; e += kRows) {
      int r = e / D, d = e % D;
      int qi = q0 + r;
      float qv = 0.f, gv = 0.f;
      if (qi < Tn) {
        qv = toF(base[qi * row_stride + h * D + d]) * scale;
        gv = toF(dout[(int64_t(b) * Tn + qi) * C + h * D + d]);
      }
      qs[r][d] = qv;
      gs[r][d] = gv;
    }
    if (threadIdx.x < kTile) {
      int qi = q0 + threadIdx.x;
      ls[threadIdx.x] = qi < Tn ? loadAny(lse, lse_bf16, stat + qi) : 0.f;
      ds_[threadIdx.x] = qi < Tn ? delta[stat + qi] : 0.f;
    }
    __syncthreads();
    if (j >= Tn) continue;
    int rmax = min(kTile, Tn - q0);
    for (int r = 0; r < rmax; ++r) {
      if (q0 + r < j) continue;  // causal: query must not precede the key
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < D; ++d) {
        s += qs[r][d] * k[d];
        dp += gs[r][d] * vown[threadIdx.x][d];
      }
      float p = expf(s - ls[r]);
      float dsc = p * (dp - ds_[r]);
#pragma unroll
      for (int d = 0; d < D; ++d) {
        dv[d] += p * gs[r][d];
        dk[d] += dsc * qs[r][d];
      }
    }
  }
  if (j < Tn) {
    T* row = dqkv + (int64_t(b) * Tn + j) * (3 * int64_t(C)) + h * D;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      float kv = dk[d], vv = dv[d];
      if (accumulate) {
        kv += toF(row[C + d]);
        vv += toF(row[2 * C + d]);
      }
      row[C + d] = fromF<T>(kv);
      row[2 * C + d] = fromF<T>(vv);
    }
  }
}

template <class T, int D>
void launchForward(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn,
                   int64_t C, int64_t H, cudaStream_t s) {
  dim3 grid(unsigned((Tn + kRows - 1) / kRows), unsigned(H), unsigned(B));
  attentionForwardKernel<T, D><<<grid, kRows, 0, s>>>(static_cast<T*>(out), lse, isBf16(lse_dt),
                                                      static_cast<const T*>(qkv), int(Tn), int(C),
                                                      int(H), 1.f / sqrtf(float(D)));
  TANDEM_CUDA_LAUNCH_CHECK();
}

template <class T, int D>
void launchBackward(void* dqkv, const void* dout, const void* qkv, const void* lse, DType lse_dt,
                    const float* delta, int64_t B, int64_t Tn, int64_t C, int64_t H,
                    bool accumulate, cudaStream_t s) {
  dim3 grid(unsigned((Tn + kRows - 1) / kRows), unsigned(H), unsigned(B));
  float scale = 1.f / sqrtf(float(D));
  attentionDqKernel<T, D><<<grid, kRows, 0, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse,
      isBf16(lse_dt), delta, int(Tn), int(C), int(H), scale, accumulate);
  TANDEM_CUDA_LAUNCH_CHECK();
  attentionDkvKernel<T, D><<<grid, kRows, 0, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse,
      isBf16(lse_dt), delta, int(Tn), int(C), int(H), scale, accumulate);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void prepareKernels() {
  prepareAttentionKernels();
  prepareGeluGemm();
  prepareLayernormKernels();
  prepareRmsnormKernels();
  prepareCrossEntropyKernels();
}

bool attentionRunsHere(int64_t C, int64_t H, DType dt) {
  return attentionTensorCoreEligible(C, H, dt) || (H > 0 && C % H == 0 && gpuAttentionHeadWidthSupported(C / H));
}

#define TANDEM_DISPATCH_HEAD_DIM(Dv, ...)                                          \
  do {                                                                            \
    switch (Dv) {                                                                 \
      case 16: { constexpr int D = 16; __VA_ARGS__; break; }                      \
      case 32: { constexpr int D = 32; __VA_ARGS__; break; }                      \
      case 64: { constexpr int D = 64; __VA_ARGS__; break; }                      \
      default: throw CudaError("attention: heads 16, 32, 64 wide (128: tensor cores)"); \
    }                                                                             \
  } while (0)

void attentionForward(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn,
                      int64_t C, int64_t H, DType dt, cudaStream_t s) {
  if (attentionTensorCoreEligible(C, H, dt))
    return attentionForwardTc(out, lse, lse_dt, {qkv, qkv, multiHeadLayout(C, H)}, B, Tn, C, H, s);
  TANDEM_DISPATCH_DT(dt, TANDEM_DISPATCH_HEAD_DIM(C / H, (launchForward<T, D>(out, lse, lse_dt, qkv, B, Tn, C, H, s))));
}

void attentionBackward(void* dqkv, void* dbias, const void* dout, const void* qkv, const void* out,
                       const void* lse, DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H,
                       bool accumulate, bool accumulate_bias, DType dt, float* scratch, cudaStream_t s) {
  if (dbias && accumulate)
    throw CudaError("attentionBackward: a bias gradient is summed from the output it writes, so the output "
                    "must not accumulate");
  // The tensor-core path computes delta inside its dQ kernel, and the bias
  // gradient's partial sums as it stores its tiles.
  if (attentionTensorCoreEligible(C, H, dt)) {
    float* partial = dbias ? scratch + B * H * Tn : nullptr;
    attentionBackwardTc(dqkv, dout, {qkv, qkv, multiHeadLayout(C, H)}, out, lse, lse_dt, scratch, partial, B, Tn, C, H,
                        accumulate, s);
    if (dbias)
      biasGradientFromPartials(dbias, partial, 3 * C, gpu_footprint::attentionBiasPartialRows(B, Tn),
                               accumulate_bias, dt, s);
    return;
  }
  TANDEM_DISPATCH_DT(dt, {
    TANDEM_DISPATCH_HEAD_DIM(C / H, {
      const int64_t threads = B * H * Tn * (D * int64_t(sizeof(T)) / 16);
      attentionDeltaKernel<T, D><<<unsigned(std::max<int64_t>(1, (threads + 255) / 256)), 256, 0, s>>>(
          scratch, static_cast<const T*>(dout), static_cast<const T*>(out), int(B), int(Tn), int(C), int(H));
    });
    TANDEM_CUDA_LAUNCH_CHECK();
    TANDEM_DISPATCH_HEAD_DIM(C / H, (launchBackward<T, D>(dqkv, dout, qkv, lse, lse_dt, scratch, B,
                                                         Tn, C, H, accumulate, s)));
  });
  // The CUDA-core path: the bias gradient from the finished output.
  if (dbias) biasGradient(dbias, dqkv, B * Tn, 3 * C, accumulate_bias, dt, scratch, s);
}

}  // namespace tandem::cuda
