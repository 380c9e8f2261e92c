#include "engine/cuda/vocab_parallel.h"

#include "engine/cuda/device_math.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool mine(int64_t token, int64_t first, int64_t rows) {
  return token >= first && token < first + rows;
}

template <class T>
__global__ void embeddingRowsKernel(T* out, const int32_t* tokens, const T* wte_rows, const T* wpe, int64_t BT,
                                    int64_t Tn, int64_t C, int64_t first, int64_t rows, bool add_position) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < BT * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C, c = i % C, token = tokens[bt];
    const float row = mine(token, first, rows) ? toF(wte_rows[(token - first) * C + c]) : 0.f;
    const float pos = wpe && add_position ? toF(wpe[(bt % Tn) * C + c]) : 0.f;
    out[i] = fromF<T>(row + pos);
  }
}

// One block per distinct token of the batch (the sorted index), the rank's only.
template <class T>
__global__ void embeddingRowsBackwardKernel(T* dwte_rows, const T* dout, const int32_t* tokens, const int32_t* order,
                                            const int32_t* seg_start, const int32_t* seg_count, int64_t C,
                                            int64_t first, int64_t rows) {
  const int segments = *seg_count;
  for (int seg = blockIdx.x; seg < segments; seg += gridDim.x) {
    const int begin = seg_start[seg], end = seg_start[seg + 1];
    const int64_t v = tokens[order[begin]];
    if (!mine(v, first, rows)) continue;
    T* row = dwte_rows + (v - first) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = toF(row[c]);
      for (int p = begin; p < end; ++p) acc += toF(dout[int64_t(order[p]) * C + c]);
      row[c] = fromF<T>(acc);
    }
  }
}

template <class T>
__global__ void positionBackwardKernel(T* dwpe, const T* dout, int64_t B, int64_t Tn, int64_t C, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < Tn * C; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = accumulate ? toF(dwpe[i]) : 0.f;
    for (int64_t b = 0; b < B; ++b) acc += toF(dout[b * Tn * C + i]);
    dwpe[i] = fromF<T>(acc);
  }
}

// One block per row of the rank's logits.
template <class T>
__global__ void statsKernel(float* stats, const T* logits, const int32_t* targets, int64_t rows, int64_t first) {
  __shared__ float shared[32];
  const int64_t m = blockIdx.x;
  const T* row = logits + m * rows;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x) mx = fmaxf(mx, toF(row[j]));
  mx = blockMax(mx, shared);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x) sum += expf(toF(row[j]) - mx);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0) {
    const int64_t target = targets[m];
    stats[m * 3] = mx;
    stats[m * 3 + 1] = sum;
    stats[m * 3 + 2] = mine(target, first, rows) ? toF(row[target - first]) : 0.f;
  }
}

struct Global {
  double max, sum_exp, target_logit;
};

__device__ __forceinline__ Global combine(const float* gathered, int64_t M, int64_t ranks, int64_t m) {
  Global g{-INFINITY, 0.0, 0.0};
  for (int64_t r = 0; r < ranks; ++r) g.max = fmax(g.max, double(gathered[(r * M + m) * 3]));
  for (int64_t r = 0; r < ranks; ++r) {
    const float* s = gathered + (r * M + m) * 3;
    g.sum_exp += double(s[1]) * exp(double(s[0]) - g.max);
    g.target_logit += double(s[2]);
  }
  return g;
}

__global__ void lossesKernel(void* losses, int loss_bf16, float* scratch, const float* gathered, int64_t M,
                             int64_t ranks) {
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m < M; m += int64_t(gridDim.x) * blockDim.x) {
    const Global g = combine(gathered, M, ranks, m);
    const float loss = float(log(g.sum_exp) - (g.target_logit - g.max));
    scratch[m] = loss;
    storeAny(losses, loss_bf16, m, loss);
  }
}

// The losses' sum in row order (one thread: M is a micro-batch's tokens),
// added to the step's sum.
__global__ void lossSumKernel(float* loss_sum, const float* scratch, int64_t M) {
  double s = 0;
  for (int64_t m = 0; m < M; ++m) s += scratch[m];
  *loss_sum += float(s);
}

template <class T>
__global__ void crossEntropyRowsBackwardKernel(T* logits, const int32_t* targets, const float* gathered, int64_t M,
                                               int64_t first, int64_t rows, int64_t ranks, float scale) {
  const int64_t m = blockIdx.x;
  __shared__ double max_and_inv[2];
  if (threadIdx.x == 0) {
    const Global g = combine(gathered, M, ranks, m);
    max_and_inv[0] = g.max;
    max_and_inv[1] = 1.0 / g.sum_exp;
  }
  __syncthreads();
  T* row = logits + m * rows;
  const int64_t target = targets[m];
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x) {
    const double p = exp(double(toF(row[j])) - max_and_inv[0]) * max_and_inv[1];
    row[j] = fromF<T>(float(double(scale) * (p - (first + j == target ? 1.0 : 0.0))));
  }
}

}  // namespace

void vocabParallelEmbedding(void* out, const int32_t* tokens, const void* wte_rows, const void* wpe, int64_t B,
                            int64_t Tn, int64_t C, int64_t first, int64_t rows, bool add_position, DType dt,
                            cudaStream_t s) {
  TANDEM_DISPATCH_DT(dt, embeddingRowsKernel<T><<<gridFor(B * Tn * C, kThreads), kThreads, 0, s>>>(
                             static_cast<T*>(out), tokens, static_cast<const T*>(wte_rows),
                             static_cast<const T*>(wpe), B * Tn, Tn, C, first, rows, add_position));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void vocabParallelEmbeddingBackward(void* dwte_rows, void* dwpe, const void* dout, const int32_t* tokens,
                                    const TokenIndex& index, int64_t B, int64_t Tn, int64_t C, int64_t first,
                                    int64_t rows, bool accumulate_wte, bool accumulate_wpe, DType dt,
                                    cudaStream_t s) {
  if (!accumulate_wte) TANDEM_CUDA_CHECK(cudaMemsetAsync(dwte_rows, 0, rows * C * dtypeSize(dt), s));
  TANDEM_DISPATCH_DT(dt, {
    embeddingRowsBackwardKernel<T><<<2048, 128, 0, s>>>(static_cast<T*>(dwte_rows), static_cast<const T*>(dout),
                                                       tokens, index.order, index.seg_start, index.seg_count, C,
                                                       first, rows);
    TANDEM_CUDA_LAUNCH_CHECK();
    if (dwpe)
      positionBackwardKernel<T><<<gridFor(Tn * C, kThreads), kThreads, 0, s>>>(
          static_cast<T*>(dwpe), static_cast<const T*>(dout), B, Tn, C, accumulate_wpe);
  });
  TANDEM_CUDA_LAUNCH_CHECK();
}

void crossEntropyStats(float* stats, const void* logits, const int32_t* targets, int64_t M, int64_t first,
                       int64_t rows, DType dt, cudaStream_t s) {
  if (M <= 0) return;
  TANDEM_DISPATCH_DT(dt, statsKernel<T><<<unsigned(M), kThreads, 0, s>>>(stats, static_cast<const T*>(logits),
                                                                         targets, rows, first));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void vocabParallelCrossEntropy(void* losses, DType loss_dt, const float* gathered, int64_t M, int64_t ranks,
                               float* loss_sum, float* scratch, cudaStream_t s) {
  if (M <= 0) return;
  lossesKernel<<<gridFor(M, kThreads), kThreads, 0, s>>>(losses, isBf16(loss_dt), scratch, gathered, M, ranks);
  TANDEM_CUDA_LAUNCH_CHECK();
  lossSumKernel<<<1, 1, 0, s>>>(loss_sum, scratch, M);
  TANDEM_CUDA_LAUNCH_CHECK();
}

void vocabParallelCrossEntropyBackward(void* logits, const int32_t* targets, const float* gathered, int64_t M,
                                       int64_t first, int64_t rows, int64_t ranks, float scale, DType dt,
                                       cudaStream_t s) {
  if (M <= 0) return;
  TANDEM_DISPATCH_DT(dt, crossEntropyRowsBackwardKernel<T><<<unsigned(M), kThreads, 0, s>>>(
                             static_cast<T*>(logits), targets, gathered, M, first, rows, ranks, scale));
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
