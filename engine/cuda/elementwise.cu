// Elementwise and row kernels: embedding, GELU, residual add, fused softmax +
// cross-entropy, matmul bias gradient. Every reduction runs in a fixed order.
#include <cmath>

#include "engine/cuda/device_math.cuh"
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
    out[i] = fromF<T>(toF(wte[tok * C + c]) + toF(wpe[t * C + c]));
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

constexpr int kBiasRowChunks = 64;

template <class T>
__global__ void biasPartialKernel(float* partial, const T* dy, int64_t M, int64_t N) {
  // blockDim = (32, 8); grid = (ceil(N/32), kBiasRowChunks)
  __shared__ float acc[8][33];
  int64_t n = blockIdx.x * 32 + threadIdx.x;
  int64_t rows_per = (M + gridDim.y - 1) / gridDim.y;
  int64_t r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
  float s = 0.f;
  if (n < N)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += toF(dy[r * N + n]);
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && n < N) {
    float t = 0.f;
    for (int j = 0; j < 8; ++j) t += acc[j][threadIdx.x];
    partial[blockIdx.y * N + n] = t;
  }
}

template <class T>
__global__ void biasFinalKernel(T* db, const float* partial, int64_t N, int chunks, bool accumulate) {
  int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  float s = accumulate ? toF(db[n]) : 0.f;
  for (int j = 0; j < chunks; ++j) s += partial[j * N + n];
  db[n] = fromF<T>(s);
}

}  // namespace

void embeddingForward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                      int64_t B, int64_t Tn, int64_t C, DType dt, cudaStream_t s) {
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
    wteBackwardKernel<T><<<2048, 128, 0, s>>>(static_cast<T*>(dwte), static_cast<const T*>(dout),
                                              tokens, index.order, index.seg_start,
                                              index.seg_count, C);
    TANDEM_CUDA_LAUNCH_CHECK();
    wpeBackwardKernel<T><<<gridFor(Tn * C, kThreads), kThreads, 0, s>>>(
        static_cast<T*>(dwpe), static_cast<const T*>(dout), B, Tn, C, accumulate_wpe);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

void geluForward(void* y, const void* x, int64_t n, DType dt, cudaStream_t s) {
  TANDEM_DISPATCH_DT(dt, geluForwardKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(y), static_cast<const T*>(x), n));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void geluBackward(void* dx, const void* dy, const void* x, int64_t n, bool accumulate, DType dt,
                  cudaStream_t s) {
  TANDEM_DISPATCH_DT(dt, geluBackwardKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(dx), static_cast<const T*>(dy),
                             static_cast<const T*>(x), n, accumulate));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void addForward(void* c, const void* a, const void* b, int64_t n, DType dt, cudaStream_t s) {
  TANDEM_DISPATCH_DT(dt, addKernel<T><<<gridFor(n, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(c), static_cast<const T*>(a),
                             static_cast<const T*>(b), n));
  TANDEM_CUDA_LAUNCH_CHECK();
}

int64_t crossEntropyScratchBytes(int64_t M) { return M * int64_t(sizeof(float)); }

void crossEntropy(void* losses, DType loss_dt, void* dlogits, const void* logits,
                  const int32_t* targets, int64_t M, int64_t V, float scale, DType dt,
                  float* loss_sum, float* scratch, cudaStream_t s) {
  float* row_loss = loss_sum ? scratch : nullptr;
  TANDEM_DISPATCH_DT(dt, crossEntropyKernel<T><<<unsigned(M), 512, 0, s>>>(
                             losses, isBf16(loss_dt), static_cast<T*>(dlogits),
                             static_cast<const T*>(logits), targets, V, scale, row_loss));
  TANDEM_CUDA_LAUNCH_CHECK();
  if (loss_sum) {
    sumRowsKernel<<<1, 1024, 0, s>>>(loss_sum, row_loss, M);
    TANDEM_CUDA_LAUNCH_CHECK();
  }
}

int64_t biasGradientScratchBytes(int64_t N) { return kBiasRowChunks * N * int64_t(sizeof(float)); }

void biasGradient(void* db, const void* dy, int64_t M, int64_t N, bool accumulate, DType dt,
                  float* scratch, cudaStream_t s) {
  dim3 grid(unsigned((N + 31) / 32), kBiasRowChunks);
  TANDEM_DISPATCH_DT(dt, {
    biasPartialKernel<T><<<grid, dim3(32, 8), 0, s>>>(scratch, static_cast<const T*>(dy), M, N);
    TANDEM_CUDA_LAUNCH_CHECK();
    biasFinalKernel<T><<<gridFor(N, kThreads), kThreads, 0, s>>>(static_cast<T*>(db), scratch, N,
                                                                 kBiasRowChunks, accumulate);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
