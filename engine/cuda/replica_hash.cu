// A buffer's 64-bit fingerprint for the replica check (issue 51; the host
// side is engine/checkpoint/consistency.h). Each 8-byte word i of the
// buffer (the last one zero-padded) is mixed with its index and the mixed
// words are summed modulo 2^64: integer sums do not depend on their order,
// so the value is the same however the blocks are scheduled, on every rank
// and in every run, and a flipped bit changes its word's mix and the sum.
#include "engine/cuda/check.h"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  // splitmix64's finalizer: every input bit reaches every output bit.
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int kThreads = 256;

__global__ void replicaHashKernel(const unsigned char* data, long long bytes, unsigned long long* out) {
  const long long words = (bytes + 7) / 8;
  unsigned long long sum = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned long long w = 0;
    if ((i + 1) * 8 <= bytes && (reinterpret_cast<uintptr_t>(data) & 7) == 0) {
      w = reinterpret_cast<const unsigned long long*>(data)[i];
    } else {
      for (int k = 0; k < 8 && i * 8 + k < bytes; ++k) w |= (unsigned long long)data[i * 8 + k] << (8 * k);
    }
    sum += mix64(w + (unsigned long long)i * 0x9e3779b97f4a7c15ull);
  }
  // Warp sums, then one per warp into the block's, then one add per block.
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
  __shared__ unsigned long long warp_sum[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long block = 0;
    for (int w = 0; w < kThreads / 32; ++w) block += warp_sum[w];
    atomicAdd(out, block);
  }
}

}  // namespace

void replicaHash(const void* data, int64_t bytes, uint64_t* out, cudaStream_t s) {
  TANDEM_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(uint64_t), s));
  if (bytes <= 0) return;
  const long long words = (bytes + 7) / 8;
  const int blocks = int(std::min<long long>((words + kThreads - 1) / kThreads, 1024));
  replicaHashKernel<<<blocks, kThreads, 0, s>>>(static_cast<const unsigned char*>(data), (long long)bytes,
                                                reinterpret_cast<unsigned long long*>(out));
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cuda
