#pragma once
// Device tensors and tolerances shared by the kernel tests: each CUDA kernel
// against the CPU reference kernel on the same (bf16-rounded) inputs.

#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "engine/ir/types.h"
#include "engine/numerics/bf16.h"
#include "tests/gpu/gpu_test.h"

namespace tandem::gputest {

// A device tensor of floats stored as `dt`.
struct Dev {
  DType dt;
  size_t n;
  void* p = nullptr;
  Dev(DType d, size_t count) : dt(d), n(count) {
    cudaMalloc(&p, std::max<size_t>(1, n) * dtypeSize(d));
    cudaMemset(p, 0xFF, n * dtypeSize(d));  // poison: unwritten outputs show up as NaN
  }
  ~Dev() { cudaFree(p); }
  void upload(const std::vector<float>& v) {
    if (dt == DType::BF16) {
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = floatToBf16Bits(v[i]);
      cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice);
    } else {
      cudaMemcpy(p, v.data(), n * 4, cudaMemcpyHostToDevice);
    }
  }
  std::vector<float> download() const {
    cudaDeviceSynchronize();
    std::vector<float> v(n);
    if (dt == DType::BF16) {
      std::vector<uint16_t> h(n);
      cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n; ++i) v[i] = bf16BitsToFloat(h[i]);
    } else {
      cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost);
    }
    return v;
  }
};

inline std::vector<float> rounded(std::vector<float> v, DType dt) {
  if (dt == DType::BF16)
    for (auto& x : v) x = roundToBf16(x);
  return v;
}

// One seed for every kernel test program: a failure reproduces.
inline std::mt19937 rng(20261130);

inline double tol(DType dt) { return dt == DType::BF16 ? 1e-2 : 1e-5; }
inline std::string tag(DType dt, const char* what) { return fmt::format("[{}] {}", toString(dt), what); }

inline float* scratchBuffer(size_t bytes) {
  static void* p = nullptr;
  static size_t have = 0;
  if (bytes > have) {
    cudaFree(p);
    cudaMalloc(&p, bytes);
    have = bytes;
  }
  return static_cast<float*>(p);
}

}  // namespace tandem::gputest
