#include "engine/cuda/device.h"

#include <cuda_runtime.h>

#include "engine/cuda/check.h"

namespace tandem::cuda {

int usableGpuCount(std::string* reason) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason) *reason = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later queries start clean
    return 0;
  }
  if (count == 0 && reason) *reason = "no CUDA device is visible";
  return count;
}

DeviceInfo deviceInfo(int device) {
  DeviceInfo info;
  info.index = device;
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  int current = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&current));
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  TANDEM_CUDA_CHECK(cudaSetDevice(current));
  info.free_bytes = int64_t(free_b);
  info.total_bytes = int64_t(total_b);
  info.peak_bf16_flops = peakBf16Flops(info.name);
  return info;
}

double peakBf16Flops(const std::string& name) {
  struct Entry {
    const char* key;
    double flops;
  };
  // Dense (no sparsity) bf16 tensor-core rates of the SXM parts.
  static const Entry table[] = {{"H200", 989e12}, {"H100", 989e12}, {"GH200", 989e12},
                                {"A100", 312e12}, {"L40S", 362e12}, {"A10", 125e12}};
  for (const Entry& e : table)
    if (name.find(e.key) != std::string::npos) return e.flops;
  return 0;
}

}  // namespace tandem::cuda
