// Initial parameter values drawn on the device: element i of a parameter is
// the same function of (seed, i) as on the host (engine/numerics/
// portable_normal.h), so a 7B model starts from the CPU reference's bits
// without 6.7 billion values drawn on the host and copied in.
#include <cuda_bf16.h>

#include "engine/cuda/check.h"
#include "engine/cuda/kernels.h"
#include "engine/numerics/portable_normal.h"

namespace tandem::cuda {
namespace {

// The host's floatToBf16Bits (engine/numerics/bf16.h): round to nearest
// even, NaN kept quiet.
__device__ __forceinline__ uint16_t bf16BitsOf(float f) {
  const uint32_t u = __float_as_uint(f);
  if (f != f) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

template <typename Out>
__global__ void fillInitialKernel(Out* out, int64_t begin, int64_t n, bool normal, float constant, uint64_t seed,
                                  double stddev) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = normal ? portable::scaledNormalAt(seed, uint64_t(begin + i), stddev) : constant;
    if constexpr (sizeof(Out) == 2)
      out[i] = bf16BitsOf(v);
    else
      out[i] = v;
  }
}

}  // namespace

void fillInitialValues(void* out, DType dt, int64_t begin, int64_t n, bool normal, float constant, uint64_t seed,
                       double stddev, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32));
  if (dt == DType::BF16)
    fillInitialKernel<<<blocks, kThreads, 0, s>>>(static_cast<uint16_t*>(out), begin, n, normal, constant, seed,
                                                  stddev);
  else
    fillInitialKernel<<<blocks, kThreads, 0, s>>>(static_cast<float*>(out), begin, n, normal, constant, seed, stddev);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
