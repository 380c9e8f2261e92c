#include "engine/cuda/device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

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

int smCount() {
  static const int n = [] {
    int dev = 0, sms = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&dev));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }();
  return n;
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

namespace {

// The driver's release ("580.82.07") from NVML's documented C API, or ""
// when the library or the call is missing.
std::string driverRelease() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "";
  using Init = int (*)();
  using Shutdown = int (*)();
  using Version = int (*)(char*, unsigned int);
  const auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<Shutdown>(dlsym(lib, "nvmlShutdown"));
  const auto version = reinterpret_cast<Version>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  std::string out;
  if (init != nullptr && shutdown != nullptr && version != nullptr && init() == 0) {
    char text[96] = {0};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    if (version(text, sizeof text) == 0) out = text;
    shutdown();
  }
  dlclose(lib);
  return out;
}

}  // namespace

DeviceRecord deviceRecord(int device) {
  const DeviceInfo info = deviceInfo(device);
  DeviceRecord r;
  r.index = info.index;
  r.name = info.name;
  r.memory_bytes = info.total_bytes;
  r.sm_count = info.sm_count;
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  r.cc_major = prop.major;
  r.cc_minor = prop.minor;
  TANDEM_CUDA_CHECK(cudaDriverGetVersion(&r.cuda_driver));
  TANDEM_CUDA_CHECK(cudaRuntimeGetVersion(&r.cuda_runtime));
  r.cublaslt = int64_t(cublasLtGetVersion());
  if (ncclGetVersion(&r.nccl) != ncclSuccess) r.nccl = 0;
  r.driver = driverRelease();
  return r;
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
