#include "engine/cuda/local_collectives.h"

#include <fmt/format.h>

#include <type_traits>

#include "engine/cuda/check.h"
#include "engine/cuda/device_math.cuh"

namespace tandem::cuda {
namespace {

template <class T>
__device__ __forceinline__ float toAcc(T v) {
  return toF(v);
}
template <>
__device__ __forceinline__ float toAcc<int32_t>(int32_t v) {
  return float(v);
}
template <class T>
__device__ __forceinline__ T fromAcc(float v) {
  return fromF<T>(v);
}
template <>
__device__ __forceinline__ int32_t fromAcc<int32_t>(float v) {
  return int32_t(v);
}

// Integer sums stay exact in int64; floating sums accumulate in fp32.
template <class T>
__device__ __forceinline__ T sumAt(const LocalBuffers& b, int members, int64_t i, bool average) {
  if constexpr (std::is_same_v<T, uint8_t>) {  // never reduced (localCollective refuses it)
    return static_cast<const T*>(b.in[0])[i];
  } else if constexpr (std::is_same_v<T, int32_t>) {
    int64_t acc = 0;
    for (int m = 0; m < members; ++m) acc += static_cast<const int32_t*>(b.in[m])[i];
    return int32_t(average ? acc / members : acc);
  } else {
    float acc = 0.f;
    for (int m = 0; m < members; ++m) acc += toAcc(static_cast<const T*>(b.in[m])[i]);
    return fromAcc<T>(average ? acc / float(members) : acc);
  }
}

template <class T>
__global__ void localCollectiveKernel(LocalOp op, LocalBuffers b, int members, int64_t count, bool average) {
  const int64_t total = op == LocalOp::AllReduce ? count : count * members;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    switch (op) {
      case LocalOp::AllReduce: {
        const T v = sumAt<T>(b, members, i, average);
        for (int m = 0; m < members; ++m) static_cast<T*>(b.out[m])[i] = v;
        break;
      }
      case LocalOp::ReduceScatterInPlace:
        static_cast<T*>(b.out[i / count])[i] = sumAt<T>(b, members, i, average);
        break;
      case LocalOp::ReduceScatter:
        static_cast<T*>(b.out[i / count])[i % count] = sumAt<T>(b, members, i, average);
        break;
      case LocalOp::AllGatherInPlace: {
        const int64_t owner = i / count;
        const T v = static_cast<const T*>(b.in[owner])[i];
        for (int m = 0; m < members; ++m)
          if (m != owner) static_cast<T*>(b.out[m])[i] = v;
        break;
      }
      case LocalOp::AllGather: {
        const T v = static_cast<const T*>(b.in[i / count])[i % count];
        for (int m = 0; m < members; ++m) static_cast<T*>(b.out[m])[i] = v;
        break;
      }
    }
  }
}

template <class T>
void launch(LocalOp op, const LocalBuffers& b, int members, int64_t count, bool average, cudaStream_t s) {
  const int64_t total = op == LocalOp::AllReduce ? count : count * members;
  if (total <= 0) return;
  localCollectiveKernel<T><<<gridFor(total, 256, 4096), 256, 0, s>>>(op, b, members, count, average);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

bool reduces(LocalOp op) {
  return op == LocalOp::AllReduce || op == LocalOp::ReduceScatterInPlace || op == LocalOp::ReduceScatter;
}

}  // namespace

void localCollective(LocalOp op, const LocalBuffers& buffers, int members, int64_t count, DType dt, bool average,
                     cudaStream_t s) {
  if (members < 1 || members > kMaxLocalRanks)
    throw CudaError(fmt::format("in-process collective over {} ranks: 1 to {} share one GPU", members, kMaxLocalRanks));
  switch (dt) {
    case DType::F32: return launch<float>(op, buffers, members, count, average, s);
    case DType::BF16: return launch<bf16>(op, buffers, members, count, average, s);
    case DType::I32: return launch<int32_t>(op, buffers, members, count, average, s);
    case DType::F8:
    case DType::U8:
      if (reduces(op)) throw CudaError(fmt::format("in-process collective: no reduction of {}", toString(dt)));
      return launch<uint8_t>(op, buffers, members, count, average, s);
  }
}

}  // namespace tandem::cuda
