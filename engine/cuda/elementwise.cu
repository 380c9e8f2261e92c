// Elementwise and row kernels: embedding, GELU, residual add, matmul bias
// gradient. Every reduction runs in a fixed order. (The fused softmax +
// cross-entropy is in cross_entropy.cu.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/fp8_write.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void embeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int64_t BT, int64_t Tn, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < BT * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t row = i / C, c = i % C;
    int64_t t = row % Tn;
    int64_t tok = tokens[row];
    out[i] = wpe ? fromF<T>(toF(wte[tok * C + c]) + toF(wpe[t * C + c])) : wte[tok * C + c];
  }
}

template <class T>
__global__ void wpeBackwardKernel(T* dwpe, const T* dout, int64_t B, int64_t Tn, int64_t C,
                                  bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < Tn * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    float acc = accumulate ? toF(dwpe[i]) : 0.f;
    for (int64_t b = 0; b < B; ++b) acc += toF(dout[b * Tn * C + i]);
    dwpe[i] = fromF<T>(acc);
  }
}

// One block per distinct token (grid-stride, so the launch shape does not
// depend on the data and a captured graph stays valid).
template <class T>
__global__ void wteBackwardKernel(T* dwte, const T* dout, const int32_t* tokens,
                                  const int32_t* order, const int32_t* seg_start,
                                  const int32_t* seg_count, int64_t C) {
  int segments = *seg_count;
  for (int seg = blockIdx.x; seg < segments; seg += gridDim.x) {
    int begin = seg_start[seg], end = seg_start[seg + 1];
    int64_t v = tokens[order[begin]];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = toF(dwte[v * C + c]);
      for (int p = begin; p < end; ++p) acc += toF(dout[int64_t(order[p]) * C + c]);
      dwte[v * C + c] = fromF<T>(acc);
    }
  }
}

// bf16 rows whose width is a multiple of 8, 16-byte accesses. The forward:
// one thread per 8 output elements, 32-bit index arithmetic (the scalar
// kernel's 64-bit divisions per element made it 72 us for GPT-2 124M's
// 16384 x 768 on one H200).
__global__ void embeddingForwardVec(uint4* out, const int32_t* tokens, const uint4* wte, const uint4* wpe,
                                    int rows, int Tn, int c8) {
  const int n = rows * c8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int row = i / c8, c = i - row * c8;
    const int t = row % Tn;
    const uint4 a = wte[int64_t(tokens[row]) * c8 + c];
    if (!wpe) {  // Llama: no position table, the row itself
      out[i] = a;
      continue;
    }
    const uint4 b = wpe[int64_t(t) * c8 + c];
    const bf16* ha = reinterpret_cast<const bf16*>(&a);
    const bf16* hb = reinterpret_cast<const bf16*>(&b);
    uint4 r;
    bf16* hr = reinterpret_cast<bf16*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) hr[j] = __float2bfloat16_rn(__bfloat162float(ha[j]) + __bfloat162float(hb[j]));
    out[i] = r;
  }
}

// Adds, column group c (8 bf16) of every dout row of one token's segment
// [begin, end) of the sorted order, into acc, in order.
__device__ __forceinline__ void addSegmentRows8(float (&acc)[8], const bf16* dout, const int32_t* order, int begin,
                                                int end, int c8, int c) {
#pragma unroll 4
  for (int p = begin; p < end; ++p) {
    const uint4 g = reinterpret_cast<const uint4*>(dout)[int64_t(order[p]) * c8 + c];
    const bf16* hg = reinterpret_cast<const bf16*>(&g);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(hg[j]);
  }
}

// The wte gradient, one warp per distinct token, 8 columns per lane: the same
// additions in the same order as wteBackwardKernel (the row's old value, then
// the positions in sorted order), so the same bits.
__global__ void wteBackwardVec(bf16* dwte, const bf16* dout, const int32_t* tokens, const int32_t* order,
                               const int32_t* seg_start, const int32_t* seg_count, int c8) {
  const int segments = *seg_count;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int lane = threadIdx.x & 31;
  for (int seg = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); seg < segments; seg += warps) {
    const int begin = seg_start[seg], end = seg_start[seg + 1];
    uint4* row = reinterpret_cast<uint4*>(dwte) + int64_t(tokens[order[begin]]) * c8;
    for (int c = lane; c < c8; c += 32) {
      float acc[8];
      const uint4 old = row[c];
      const bf16* h = reinterpret_cast<const bf16*>(&old);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = __bfloat162float(h[j]);
      addSegmentRows8(acc, dout, order, begin, end, c8, c);
      uint4 r;
      bf16* hr = reinterpret_cast<bf16*>(&r);
#pragma unroll
      for (int j = 0; j < 8; ++j) hr[j] = __float2bfloat16_rn(acc[j]);
      row[c] = r;
    }
  }
}

// The gathered embedding backward (embedding_backward_gathered below): one
// warp per distinct token of every rank's batch; only the parts of the row
// inside [lo, hi) of the bucket change, by 1/ranks of the row sum.
template <class T>
__global__ void wteBackwardGatheredKernel(T* bucket, int64_t wte_at, int64_t lo, int64_t hi, const T* dout,
                                          const int32_t* tokens, const int32_t* order, const int32_t* seg_start,
                                          const int32_t* seg_count, int64_t C, float inv_ranks) {
  const int segments = *seg_count;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int lane = threadIdx.x & 31;
  for (int seg = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); seg < segments; seg += warps) {
    const int begin = seg_start[seg], end = seg_start[seg + 1];
    const int64_t row = wte_at + int64_t(tokens[order[begin]]) * C;
    if (row + C <= lo || row >= hi) continue;
    for (int64_t c = lane; c < C; c += 32) {
      if (row + c < lo || row + c >= hi) continue;
      float s = 0.f;
      for (int p = begin; p < end; ++p) s += toF(dout[int64_t(order[p]) * C + c]);
      bucket[row + c] = fromF<T>(toF(bucket[row + c]) + s * inv_ranks);
    }
  }
}

__global__ void wteBackwardGatheredVec(bf16* bucket, int64_t wte_at, int64_t lo, int64_t hi, const bf16* dout,
                                       const int32_t* tokens, const int32_t* order, const int32_t* seg_start,
                                       const int32_t* seg_count, int c8, float inv_ranks) {
  const int segments = *seg_count;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int lane = threadIdx.x & 31;
  const int64_t C = int64_t(c8) * 8;
  for (int seg = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); seg < segments; seg += warps) {
    const int begin = seg_start[seg], end = seg_start[seg + 1];
    const int64_t row = wte_at + int64_t(tokens[order[begin]]) * C;
    if (row + C <= lo || row >= hi) continue;
    for (int c = lane; c < c8; c += 32) {
      const int64_t at = row + 8 * int64_t(c);  // 8-aligned, as are lo and hi: whole vectors in or out
      if (at < lo || at >= hi) continue;
      float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      addSegmentRows8(s, dout, order, begin, end, c8, c);
      uint4* dst = reinterpret_cast<uint4*>(bucket + at);
      const uint4 old = *dst;
      const bf16* ho = reinterpret_cast<const bf16*>(&old);
      uint4 r;
      bf16* hr = reinterpret_cast<bf16*>(&r);
#pragma unroll
      for (int j = 0; j < 8; ++j) hr[j] = __float2bfloat16_rn(__bfloat162float(ho[j]) + s[j] * inv_ranks);
      *dst = r;
    }
  }
}

template <class T>
__global__ void wpeBackwardGatheredKernel(T* bucket, int64_t wpe_at, int64_t lo, int64_t hi, const T* dout,
                                          int64_t rows, int64_t TC, bool accumulate, float inv_ranks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < TC; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = wpe_at + i;
    if (at < lo || at >= hi) continue;
    float s = 0.f;
    for (int64_t q = 0; q < rows; ++q) s += toF(dout[q * TC + i]);
    bucket[at] = fromF<T>((accumulate ? toF(bucket[at]) : 0.f) + s * inv_ranks);
  }
}

__device__ __forceinline__ float geluTanh(float x, float* tanh_out) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  float u = k * (x + 0.044715f * x * x * x);
  float t = tanhf(u);
  *tanh_out = t;
  return 0.5f * x * (1.f + t);
}

template <class T>
__global__ void geluForwardKernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float t;
    y[i] = fromF<T>(geluTanh(toF(x[i]), &t));
  }
}

template <class T>
__global__ void geluBackwardKernel(T* dx, const T* dy, const T* x, int64_t n, bool accumulate) {
  const float k = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float xv = toF(x[i]), t;
    geluTanh(xv, &t);
    float dudx = k * (1.f + 3.f * 0.044715f * xv * xv);
    float grad = 0.5f * (1.f + t) + 0.5f * xv * (1.f - t * t) * dudx;
    float v = toF(dy[i]) * grad;
    if (accumulate) v += toF(dx[i]);
    dx[i] = fromF<T>(v);
  }
}

template <class T>
__global__ void addKernel(T* c, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c[i] = fromF<T>(toF(a[i]) + toF(b[i]));
}

constexpr int kBiasRowChunks = gpu_footprint::kBiasRowChunks;

template <class T>
__global__ void biasPartialKernel(float* partial, const T* dy, int64_t M, int64_t N) {
  // blockDim = (32, 8); grid = (ceil(N/32), kBiasRowChunks)
  columnPartialSums(partial, [&](int64_t r, int64_t n) { return toF(dy[r * N + n]); }, M, N);
}

// Column sums of the partial rows: blockDim = (32, kFinalSlices), grid =
// ceil(N/32). Thread (x, y) adds rows y, y + kFinalSlices, ... of column
// 32 * blockIdx.x + x, then the slices' sums are added in order: a fixed
// order for any launch. One thread per column took 6.5-8.6 us per bias for
// 256 partial rows on one H200, 8 slices 2.3-3.5 us (GPT-2 124M, profiled).
constexpr int kFinalSlices = 32;

template <class T>
__global__ void __launch_bounds__(32 * kFinalSlices)
    biasFinalKernel(T* db, const float* partial, int64_t N, int chunks, bool accumulate) {
  __shared__ float acc[kFinalSlices][33];
  const int64_t n = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (n < N) {
#pragma unroll 8
    for (int j = threadIdx.y; j < chunks; j += kFinalSlices) s += partial[j * N + n];
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || n >= N) return;
  float t = accumulate ? toF(db[n]) : 0.f;
  for (int j = 0; j < kFinalSlices; ++j) t += acc[j][threadIdx.x];
  db[n] = fromF<T>(t);
}

// bf16 bias gradient with 16-byte loads: each thread sums 8 adjacent
// columns over its slice of rows; grid = (ceil(N/256), kBiasVecChunks),
// blockDim = (32, 8). Fixed chunk count: the summation order never depends
// on the launch, so replays give the same bits.
constexpr int kBiasVecChunks = gpu_footprint::kBiasVecChunks;

__global__ void biasPartialVecKernel(float* partial, const bf16* dy, int64_t M, int64_t N) {
  __shared__ float acc[8][32 * 8 + 4];
  const int64_t c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
  const int64_t rows_per = (M + gridDim.y - 1) / gridDim.y;
  const int64_t r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
  float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (c0 < N) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(dy + r * N + c0);
      const bf16* h = reinterpret_cast<const bf16*>(&u);
#pragma unroll
      for (int i = 0; i < 8; ++i) s[i] += __bfloat162float(h[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[threadIdx.y][threadIdx.x * 8 + i] = s[i];
  __syncthreads();
  // 256 threads, one column each of the block's 256 columns.
  const int tid = threadIdx.y * 32 + threadIdx.x;
  const int64_t c = blockIdx.x * 256 + tid;
  if (c >= N) return;
  float t = 0.f;
  for (int j = 0; j < 8; ++j) t += acc[j][tid];
  partial[blockIdx.y * N + c] = t;
}

__global__ void geluForwardVec(uint4* y, const uint4* x, int64_t n8) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float f[8], t;
    unpack8(x[i], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = geluTanh(f[j], &t);
    y[i] = pack8(f);
  }
}

__global__ void geluBackwardVec(uint4* dx, const uint4* dy, const uint4* x, int64_t n8, bool accumulate) {
  const float k = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float xv[8], g[8], out[8], t;
    unpack8(x[i], xv);
    unpack8(dy[i], g);
    if (accumulate) unpack8(dx[i], out);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      geluTanh(xv[j], &t);
      const float dudx = k * (1.f + 3.f * 0.044715f * xv[j] * xv[j]);
      const float v = g[j] * (0.5f * (1.f + t) + 0.5f * xv[j] * (1.f - t * t) * dudx);
      out[j] = accumulate ? out[j] + v : v;
    }
    dx[i] = pack8(out);
  }
}

// GELU and its gradient as FP8 codes in both layouts (launchFp8Tiles):
// the values as the bf16 kernels compute them before their rounding.
struct GeluValues {
  static constexpr int kParts = 1, kLoads = 1;
  static constexpr bool kLoops = false;
  const uint4* x;
  int64_t c8;  // columns / 8
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[1]) const { raw[0] = x[r * c8 + c / 8]; }
  __device__ void compute(int64_t, int64_t, const uint4 (&raw)[1], float (&v)[1][8]) const {
    float t;
    unpack8(raw[0], v[0]);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[0][j] = geluTanh(v[0][j], &t);
  }
};

struct GeluGradValues {
  static constexpr int kParts = 1, kLoads = 2;
  static constexpr bool kLoops = false;
  const uint4* dy;
  const uint4* x;
  int64_t c8;
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[2]) const {
    raw[0] = x[r * c8 + c / 8];
    raw[1] = dy[r * c8 + c / 8];
  }
  __device__ void compute(int64_t, int64_t, const uint4 (&raw)[2], float (&v)[1][8]) const {
    const float k = 0.7978845608028654f;
    float xv[8], t;
    unpack8(raw[0], xv);
    unpack8(raw[1], v[0]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      geluTanh(xv[j], &t);
      const float dudx = k * (1.f + 3.f * 0.044715f * xv[j] * xv[j]);
      v[0][j] = v[0][j] * (0.5f * (1.f + t) + 0.5f * xv[j] * (1.f - t * t) * dudx);
    }
  }
};

__global__ void addVec(uint4* c, const uint4* a, const uint4* b, int64_t n8) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float fa[8], fb[8];
    unpack8(a[i], fa);
    unpack8(b[i], fb);
#pragma unroll
    for (int j = 0; j < 8; ++j) fa[j] += fb[j];
    c[i] = pack8(fa);
  }
}

}  // namespace

void embeddingForward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                      int64_t B, int64_t Tn, int64_t C, DType dt, cudaStream_t s) {
  if (dt == DType::BF16 && vec8(C, {out, wte, wpe}) && B * Tn * C / 8 < (int64_t(1) << 31)) {
    const int c8 = int(C / 8);
    embeddingForwardVec<<<gridFor(B * Tn * c8, kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(out), tokens, static_cast<const uint4*>(wte), static_cast<const uint4*>(wpe),
        int(B * Tn), int(Tn), c8);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, embeddingForwardKernel<T><<<gridFor(B * Tn * C, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(out), tokens, static_cast<const T*>(wte),
                             static_cast<const T*>(wpe), B * Tn, Tn, C));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void embeddingBackward(void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                       const TokenIndex& index, int64_t B, int64_t Tn, int64_t C, int64_t V,
                       bool accumulate_wte, bool accumulate_wpe, DType dt, cudaStream_t s) {
  if (!accumulate_wte) TANDEM_CUDA_CHECK(cudaMemsetAsync(dwte, 0, V * C * dtypeSize(dt), s));
  TANDEM_DISPATCH_DT(dt, {
    if (dt == DType::BF16 && vec8(C, {dwte, dout}))
      wteBackwardVec<<<1024, 256, 0, s>>>(static_cast<bf16*>(dwte), static_cast<const bf16*>(dout), tokens,
                                         index.order, index.seg_start, index.seg_count, int(C / 8));
    else
      wteBackwardKernel<T><<<2048, 128, 0, s>>>(static_cast<T*>(dwte), static_cast<const T*>(dout),
                                                tokens, index.order, index.seg_start,
                                                index.seg_count, C);
    TANDEM_CUDA_LAUNCH_CHECK();
    if (dwpe)  // null: no position table (the Llama family)
      wpeBackwardKernel<T><<<gridFor(Tn * C, kThreads), kThreads, 0, s>>>(
          static_cast<T*>(dwpe), static_cast<const T*>(dout), B, Tn, C, accumulate_wpe);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

void embeddingBackwardGathered(void* bucket, int64_t wte_at, int64_t wpe_at, int64_t shard_begin,
                               int64_t shard_end, const void* dout, const int32_t* tokens,
                               const TokenIndex& index, int ranks, int64_t B, int64_t Tn, int64_t C,
                               bool accumulate_wpe, DType dt, cudaStream_t s) {
  const float inv = 1.0f / float(ranks);
  const bool vec = dt == DType::BF16 && C % 8 == 0 && wte_at % 8 == 0 && shard_begin % 8 == 0 &&
                   shard_end % 8 == 0 && vec8(C, {bucket, dout});
  if (vec)
    wteBackwardGatheredVec<<<1024, 256, 0, s>>>(static_cast<bf16*>(bucket), wte_at, shard_begin, shard_end,
                                                static_cast<const bf16*>(dout), tokens, index.order,
                                                index.seg_start, index.seg_count, int(C / 8), inv);
  else
    TANDEM_DISPATCH_DT(dt, wteBackwardGatheredKernel<T><<<1024, 256, 0, s>>>(
                               static_cast<T*>(bucket), wte_at, shard_begin, shard_end,
                               static_cast<const T*>(dout), tokens, index.order, index.seg_start,
                               index.seg_count, C, inv));
  TANDEM_CUDA_LAUNCH_CHECK();
  // wpe: only the rank holding (part of) it has work.
  if (wpe_at + Tn * C > shard_begin && wpe_at < shard_end) {
    TANDEM_DISPATCH_DT(dt, wpeBackwardGatheredKernel<T><<<gridFor(Tn * C, kThreads), kThreads, 0, s>>>(
                               static_cast<T*>(bucket), wpe_at, shard_begin, shard_end,
                               static_cast<const T*>(dout), int64_t(ranks) * B, Tn * C, accumulate_wpe, inv));
    TANDEM_CUDA_LAUNCH_CHECK();
  }
}

void geluForward(void* y, const void* x, int64_t n, DType dt, cudaStream_t s) {
  if (dt == DType::BF16 && vec8(n, {y, x})) {
    geluForwardVec<<<gridFor(n / 8, kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(y), static_cast<const uint4*>(x), n / 8);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, geluForwardKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(y), static_cast<const T*>(x), n));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void geluBackward(void* dx, const void* dy, const void* x, int64_t n, bool accumulate, DType dt,
                  cudaStream_t s) {
  if (dt == DType::BF16 && vec8(n, {dx, dy, x})) {
    geluBackwardVec<<<gridFor(n / 8, kThreads), kThreads, 0, s>>>(
        static_cast<uint4*>(dx), static_cast<const uint4*>(dy), static_cast<const uint4*>(x), n / 8, accumulate);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, geluBackwardKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(dx), static_cast<const T*>(dy),
                             static_cast<const T*>(x), n, accumulate));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void addForward(void* c, const void* a, const void* b, int64_t n, DType dt, cudaStream_t s) {
  if (dt == DType::BF16 && vec8(n, {c, a, b})) {
    addVec<<<gridFor(n / 8, kThreads), kThreads, 0, s>>>(static_cast<uint4*>(c), static_cast<const uint4*>(a),
                                                         static_cast<const uint4*>(b), n / 8);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  TANDEM_DISPATCH_DT(dt, addKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(c), static_cast<const T*>(a),
                             static_cast<const T*>(b), n));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void biasGradientFromPartials(void* db, const float* partial, int64_t N, int64_t rows, bool accumulate, DType dt,
                              cudaStream_t s) {
  TANDEM_DISPATCH_DT(dt, biasFinalKernel<T><<<unsigned((N + 31) / 32), dim3(32, kFinalSlices), 0, s>>>(
                             static_cast<T*>(db), partial, N, int(rows), accumulate));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void biasGradient(void* db, const void* dy, int64_t M, int64_t N, bool accumulate, DType dt,
                  float* scratch, cudaStream_t s) {
  if (dt == DType::BF16 && vec8(N, {dy})) {
    biasPartialVecKernel<<<dim3(unsigned((N + 255) / 256), kBiasVecChunks), dim3(32, 8), 0, s>>>(
        scratch, static_cast<const bf16*>(dy), M, N);
    TANDEM_CUDA_LAUNCH_CHECK();
    biasFinalKernel<bf16><<<unsigned((N + 31) / 32), dim3(32, kFinalSlices), 0, s>>>(static_cast<bf16*>(db), scratch, N,
                                                                          kBiasVecChunks, accumulate);
    return TANDEM_CUDA_LAUNCH_CHECK();
  }
  dim3 grid(unsigned((N + 31) / 32), kBiasRowChunks);
  TANDEM_DISPATCH_DT(dt, {
    biasPartialKernel<T><<<grid, dim3(32, 8), 0, s>>>(scratch, static_cast<const T*>(dy), M, N);
    TANDEM_CUDA_LAUNCH_CHECK();
    biasFinalKernel<T><<<unsigned((N + 31) / 32), dim3(32, kFinalSlices), 0, s>>>(static_cast<T*>(db), scratch, N,
                                                                       kBiasRowChunks, accumulate);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

void geluForwardFp8(void* y, void* yt, const void* x, int64_t rows, int64_t cols, DType dt, const Fp8Write& out,
                    cudaStream_t s) {
  if (!yt || !tiledWriterTakes(dt, rows, cols, {x}, {y, yt}))
    throw CudaError("geluForwardFp8: writes both layouts from bf16 rows of whole 16-byte vectors (columns a "
                    "multiple of 8, rows of 4)");
  const TileOutputs<1> o{{static_cast<uint8_t*>(y)}, {static_cast<uint8_t*>(yt)}, cols};
  launchFp8Tiles<256>(o, rows, cols, out, GeluValues{static_cast<const uint4*>(x), cols / 8}, s, "geluForwardFp8");
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void geluBackwardFp8(void* dx, void* dxt, const void* dy, const void* x, int64_t rows, int64_t cols, DType dt,
                     const Fp8Write& out, cudaStream_t s) {
  if (!dxt || !tiledWriterTakes(dt, rows, cols, {dy, x}, {dx, dxt}))
    throw CudaError("geluBackwardFp8: writes both layouts from bf16 rows of whole 16-byte vectors (columns a "
                    "multiple of 8, rows of 4)");
  const TileOutputs<1> o{{static_cast<uint8_t*>(dx)}, {static_cast<uint8_t*>(dxt)}, cols};
  launchFp8Tiles<256>(o, rows, cols, out,
                      GeluGradValues{static_cast<const uint4*>(dy), static_cast<const uint4*>(x), cols / 8}, s,
                      "geluBackwardFp8");
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cuda
