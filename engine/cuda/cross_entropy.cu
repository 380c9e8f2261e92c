// Fused softmax + cross-entropy over rows of logits, with the gradient
// (softmax - onehot) * scale written in place when asked. Three kernels:
// a scalar one for any shape and dtype, one block per bf16 row reading the
// row twice from global memory (the second pass mostly from L2), and a
// persistent one that streams whole bf16 rows into shared memory with the
// TMA, two rows ahead, so each row crosses HBM once and the loads of the
// next rows run while a row is reduced. The last two give the same bits:
// the same row routine, the same order of additions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/cuda/cp_async.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/mbarrier.cuh"

namespace tandem::cuda {
namespace {

// One block per row: online max/sum in one pass, then (optionally) the
// gradient in a second pass, written over the logits when they alias.
template <class T>
__global__ void crossEntropyKernel(void* losses, int loss_bf16, T* dlogits, const T* logits,
                                   const int32_t* targets, int64_t V, float scale,
                                   float* row_loss) {
  __shared__ float shared[32];
  int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  float m = -INFINITY, s = 0.f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    float v = toF(x[i]);
    if (v > m) {
      s = s * __expf(m - v) + 1.f;
      m = v;
    } else {
      s += __expf(v - m);
    }
  }
  float row_max = blockMax(m, shared);
  float local = (m == -INFINITY) ? 0.f : s * expf(m - row_max);
  float sum = blockSum(local, shared);
  float lse = row_max + logf(sum);
  int32_t target = targets[row];
  float loss = lse - toF(x[target]);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (losses) storeAny(losses, loss_bf16, row, loss);
    if (row_loss) row_loss[row] = loss;
  }
  if (dlogits) {
    T* d = dlogits + row * V;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      float p = expf(toF(x[i]) - lse);
      d[i] = fromF<T>(scale * (p - (i == target ? 1.f : 0.f)));
    }
  }
}

__global__ void sumRowsKernel(float* loss_sum, const float* row_loss, int64_t M) {
  __shared__ float shared[32];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) acc += row_loss[i];
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0) *loss_sum += acc;
}

// One bf16 row by the whole block: x holds the row's logits (global memory,
// or a copy in shared memory), d (may be null, may alias a global x)
// receives the gradient. Each thread issues kLoads 16-byte loads before it
// uses any of them, in both passes; exp2 with log2(e) folded into one
// multiply-add; the target's -1 applied by the thread that holds it.
// Returns the row's loss in every thread. GPT-2 124M on one H200, ms per
// step (--breakdown), the one-row-per-block kernel: 1.21 for the previous
// routine (one load at a time, expf and a 64-bit target compare per element
// in the gradient pass); 0.99 / 0.96 / 0.94 / 0.97 with 1 / 2 / 3 / 4 loads
// in flight. Two it is.
template <int kLoads>
__device__ __forceinline__ float crossEntropyRow(const uint4* x, uint4* d, int v8, int32_t target, float scale,
                                                 float* shared) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int stride = blockDim.x;
  float m = -INFINITY, s = 0.f;  // s sums exp2((f - m) * log2e)
  auto absorb = [&](const uint4& u) {
    float f[8];
    unpack8(u, f);
    float mx = f[0];
#pragma unroll
    for (int j = 1; j < 8; ++j) mx = fmaxf(mx, f[j]);
    if (mx > m) {
      s *= exp2f((m - mx) * kLog2e);
      m = mx;
    }
    const float mb = m * kLog2e;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += exp2f(fmaf(f[j], kLog2e, -mb));
  };
  int i = threadIdx.x;
  for (; i + (kLoads - 1) * stride < v8; i += kLoads * stride) {
    uint4 u[kLoads];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) u[l] = x[i + l * stride];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) absorb(u[l]);
  }
  for (; i < v8; i += stride) absorb(x[i]);
  const float row_max = blockMax(m, shared);
  const float local = (m == -INFINITY) ? 0.f : s * exp2f((m - row_max) * kLog2e);
  const float sum = blockSum(local, shared);
  const float lse = row_max + logf(sum);
  const float loss = lse - __bfloat162float(reinterpret_cast<const bf16*>(x)[target]);
  // Every thread has read the target's logit before d, which may alias x,
  // is written.
  __syncthreads();
  if (!d) return loss;
  const float lb = lse * kLog2e;
  auto grad = [&](const uint4& u, int at) {
    float f[8];
    unpack8(u, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = scale * exp2f(fmaf(f[j], kLog2e, -lb));
    const int t = target - at * 8;
    if (t >= 0 && t < 8) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (j == t) f[j] -= scale;
    }
    d[at] = pack8(f);
  };
  i = threadIdx.x;
  for (; i + (kLoads - 1) * stride < v8; i += kLoads * stride) {
    uint4 u[kLoads];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) u[l] = x[i + l * stride];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) grad(u[l], i + l * stride);
  }
  for (; i < v8; i += stride) grad(x[i], i);
  return loss;
}

__device__ __forceinline__ void storeLoss(void* losses, int loss_bf16, float* row_loss, int64_t row, float loss) {
  if (threadIdx.x != 0) return;
  if (losses) storeAny(losses, loss_bf16, row, loss);
  if (row_loss) row_loss[row] = loss;
}

constexpr int kRowLoads = 2;
constexpr int kRowThreads = 1024;

// bf16 rows whose length is a multiple of 8, one block of 1024 threads per
// row, two rows per SM.
__global__ void __launch_bounds__(kRowThreads, 2)
    crossEntropyVec(void* losses, int loss_bf16, bf16* dlogits, const bf16* logits, const int32_t* targets,
                    int64_t V, float scale, float* row_loss) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float loss = crossEntropyRow<kRowLoads>(reinterpret_cast<const uint4*>(logits + row * V),
                                                dlogits ? reinterpret_cast<uint4*>(dlogits + row * V) : nullptr,
                                                int(V / 8), targets[row], scale, shared);
  storeLoss(losses, loss_bf16, row_loss, row, loss);
}

// The same rows streamed: one block per SM walks rows blockIdx.x,
// + gridDim.x, ...; thread 0 loads each whole row into one of two
// shared-memory buffers with one bulk copy (cp.async.bulk) that completes on
// the buffer's barrier, the copy of the row after next issued as soon as
// the block is done with the buffer. So a row crosses HBM once (the other
// kernel's second pass reads it again, mostly from L2), and the next row's
// copy runs while a row is reduced and written.
__global__ void __launch_bounds__(kRowThreads, 1)
    crossEntropyStream(void* losses, int loss_bf16, bf16* dlogits, const bf16* logits, const int32_t* targets,
                       int64_t M, int64_t V, uint32_t buffer_bytes, float scale, float* row_loss) {
  extern __shared__ __align__(128) unsigned char rows[];
  __shared__ __align__(8) uint64_t bars[2];
  __shared__ float shared[32];
  const uint32_t row_bytes = uint32_t(V) * 2u;
  const uint32_t bar0 = smemAddr(&bars[0]);
  auto issue = [&](int b, int64_t row) {
    mbarExpectBytes(bar0 + 8u * b, row_bytes);
    bulkLoad(smemAddr(rows + size_t(b) * buffer_bytes), logits + row * V, row_bytes, bar0 + 8u * b);
  };
  if (threadIdx.x == 0) {
    mbarInit(bar0, 1);
    mbarInit(bar0 + 8u, 1);
    fenceMbarrierInit();
    for (int b = 0; b < 2; ++b)
      if (blockIdx.x + int64_t(b) * gridDim.x < M) issue(b, blockIdx.x + int64_t(b) * gridDim.x);
  }
  __syncthreads();
  int it = 0;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x, ++it) {
    const int b = it & 1;
    mbarWait(bar0 + 8u * b, uint32_t(it >> 1) & 1u);
    const float loss = crossEntropyRow<kRowLoads>(reinterpret_cast<const uint4*>(rows + size_t(b) * buffer_bytes),
                                                  dlogits ? reinterpret_cast<uint4*>(dlogits + row * V) : nullptr,
                                                  int(V / 8), targets[row], scale, shared);
    storeLoss(losses, loss_bf16, row_loss, row, loss);
    __syncthreads();  // every thread is done with buffer b
    const int64_t next = row + 2 * int64_t(gridDim.x);
    if (threadIdx.x == 0 && next < M) {
      fenceProxyAsync();  // the threads' reads of the buffer before the copy's writes
      issue(b, next);
    }
  }
}

// What the device allows the streamed kernel: compute capability 9.0 or
// later (bulk copies, transaction barriers), and its shared memory.
struct StreamDevice {
  bool capable = false;
  int sms = 0;
  int dynamic_smem = 0;  // the kernel's limit once raised (prepareCrossEntropyKernels)
};

const StreamDevice& streamDevice() {
  static const StreamDevice d = [] {
    StreamDevice r;
    int dev = 0, major = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return r;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return r;
    r.capable = major >= 9;
    r.dynamic_smem = optin - 1024;  // the static part (barriers, reduction slots) stays below 1 KB
    return r;
  }();
  return d;
}

uint32_t streamBufferBytes(int64_t V) { return uint32_t((V * 2 + 127) / 128 * 128); }

std::once_flag g_stream_prepared;
bool g_stream_forced_off = false;

// TANDEM_CROSS_ENTROPY=rows keeps the one-row-per-block kernel; =stream (the
// default) takes the streamed one where it applies. GPT-2 124M on one H200
// (micro-batch 16, --breakdown): 0.948 -> 0.869 ms per step, near the copy
// bandwidth (3.30 GB in and out: 3.8 TB/s, against 4.26 for
// cudaMemcpy on another H200); whole steps within their run-to-run
// spread (step by step 28.39 / 28.31 / 28.23 ms against 28.31 / 28.32 /
// 28.23, alternating).
bool streamChosen() {
  static const bool on = [] {
    const char* env = std::getenv("TANDEM_CROSS_ENTROPY");
    const std::string v = env ? env : "";
    if (v.empty() || v == "stream") return true;
    if (v == "rows") return false;
    throw std::runtime_error("TANDEM_CROSS_ENTROPY must be stream or rows, not '" + v + "'");
  }();
  return on && !g_stream_forced_off;
}

}  // namespace

void prepareCrossEntropyKernels() {
  std::call_once(g_stream_prepared, [] {
    const StreamDevice& d = streamDevice();
    if (d.capable)
      TANDEM_CUDA_CHECK(
          cudaFuncSetAttribute(crossEntropyStream, cudaFuncAttributeMaxDynamicSharedMemorySize, d.dynamic_smem));
  });
}

bool crossEntropyStreams(int64_t V, DType dt) {
  const StreamDevice& d = streamDevice();
  return streamChosen() && d.capable && dt == DType::BF16 && V % 8 == 0 && V > 0 &&
         2 * int64_t(streamBufferBytes(V)) <= d.dynamic_smem;
}

void setCrossEntropyStreamed(bool on) { g_stream_forced_off = !on; }

void crossEntropy(void* losses, DType loss_dt, void* dlogits, const void* logits,
                  const int32_t* targets, int64_t M, int64_t V, float scale, DType dt,
                  float* loss_sum, float* scratch, cudaStream_t s) {
  float* row_loss = loss_sum ? scratch : nullptr;
  if (dt == DType::BF16 && vec8(V, {logits, dlogits ? dlogits : logits})) {
    if (crossEntropyStreams(V, dt)) {
      prepareCrossEntropyKernels();
      const unsigned blocks = unsigned(std::min<int64_t>(M, streamDevice().sms));
      const uint32_t buffer = streamBufferBytes(V);
      crossEntropyStream<<<blocks, kRowThreads, 2 * size_t(buffer), s>>>(
          losses, isBf16(loss_dt), static_cast<bf16*>(dlogits), static_cast<const bf16*>(logits), targets, M, V,
          buffer, scale, row_loss);
    } else {
      // 1024 threads per row: at most two rows per SM, 26 MB of GPT-2 rows in
      // flight, so the second pass over a row finds more of it in L2. GPT-2
      // 124M on one H200, alternating: 30.54 / 30.37 ms per step against 30.56
      // / 30.59 with 512 threads (one row per SM: 30.85 / 30.49).
      crossEntropyVec<<<unsigned(M), kRowThreads, 0, s>>>(losses, isBf16(loss_dt), static_cast<bf16*>(dlogits),
                                                          static_cast<const bf16*>(logits), targets, V, scale,
                                                          row_loss);
    }
  } else {
    TANDEM_DISPATCH_DT(dt, crossEntropyKernel<T><<<unsigned(M), 512, 0, s>>>(
                             losses, isBf16(loss_dt), static_cast<T*>(dlogits),
                             static_cast<const T*>(logits), targets, V, scale, row_loss));
  }
  TANDEM_CUDA_LAUNCH_CHECK();
  if (loss_sum) {
    sumRowsKernel<<<1, 1024, 0, s>>>(loss_sum, row_loss, M);
    TANDEM_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace tandem::cuda
