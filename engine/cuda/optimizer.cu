// Global gradient norm and AdamW as multi-tensor launches: one table of
// tensors in device memory, split into fixed chunks, one block per chunk.
#include <cmath>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

__device__ int slotOfChunk(const TensorSlot* slots, int num_slots, int64_t chunk) {
  int lo = 0, hi = num_slots - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (slots[mid].chunk_begin <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void sumSquaresKernel(float* partials, const TensorSlot* slots, int num_slots) {
  __shared__ float shared[32];
  int64_t chunk = blockIdx.x;
  const TensorSlot& t = slots[slotOfChunk(slots, num_slots, chunk)];
  int64_t begin = (chunk - t.chunk_begin) * kChunkElements;
  int64_t end = min(t.n, begin + kChunkElements);
  float acc = 0.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float g = t.grad_bf16 ? __bfloat162float(static_cast<const bf16*>(t.grad)[i])
                          : static_cast<const float*>(t.grad)[i];
    acc += g * g;
  }
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0) partials[chunk] = acc;
}

__global__ void normFinalKernel(float* norm, const float* partials, int64_t n) {
  __shared__ float shared[32];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0) *norm = sqrtf(acc);
}

__global__ void adamwKernel(const TensorSlot* slots, int num_slots, const StepScalars* scalars,
                            const float* norm, float grad_clip, float beta1, float beta2,
                            float eps) {
  int64_t chunk = blockIdx.x;
  const TensorSlot& t = slots[slotOfChunk(slots, num_slots, chunk)];
  int64_t begin = (chunk - t.chunk_begin) * kChunkElements;
  int64_t end = min(t.n, begin + kChunkElements);
  float lr = scalars->lr;
  double bc1 = scalars->bias_correction1, bc2 = scalars->bias_correction2;
  float grad_scale = 1.f;
  if (norm != nullptr && grad_clip > 0.f) {
    float nv = *norm;
    if (nv > grad_clip) grad_scale = float(double(grad_clip) / (double(nv) + 1e-6));
  }
  // Double arithmetic like the CPU reference: the kernel is memory-bound,
  // so it costs nothing and keeps fp32 jobs within 1e-4 of the oracle.
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double g = t.grad_bf16 ? __bfloat162float(static_cast<const bf16*>(t.grad)[i])
                           : static_cast<const float*>(t.grad)[i];
    g *= double(grad_scale);
    double m = double(beta1) * t.m[i] + (1.0 - double(beta1)) * g;
    double v = double(beta2) * t.v[i] + (1.0 - double(beta2)) * g * g;
    t.m[i] = float(m);
    t.v[i] = float(v);
    double mhat = m / bc1, vhat = v / bc2;
    double p0 = t.master[i];
    float p = float(p0 - double(lr) * (mhat / (sqrt(vhat) + double(eps)) + double(t.weight_decay) * p0));
    t.master[i] = p;
    if (t.param_bf16)
      static_cast<bf16*>(t.param)[i] = __float2bfloat16_rn(p);
    else if (t.param != t.master)
      static_cast<float*>(t.param)[i] = p;
  }
}

}  // namespace

void gradNorm(float* norm, const TensorSlot* slots, int num_slots, int64_t num_chunks,
              float* partials, cudaStream_t s) {
  sumSquaresKernel<<<unsigned(num_chunks), kThreads, 0, s>>>(partials, slots, num_slots);
  TANDEM_CUDA_LAUNCH_CHECK();
  normFinalKernel<<<1, 1024, 0, s>>>(norm, partials, num_chunks);
  TANDEM_CUDA_LAUNCH_CHECK();
}

void adamw(const TensorSlot* slots, int num_slots, int64_t num_chunks, const StepScalars* scalars,
           const float* norm, float grad_clip, float beta1, float beta2, float eps,
           cudaStream_t s) {
  adamwKernel<<<unsigned(num_chunks), kThreads, 0, s>>>(slots, num_slots, scalars, norm, grad_clip,
                                                        beta1, beta2, eps);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
