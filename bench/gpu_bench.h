#pragma once
// Whether a GPU benchmark can run here. The benchmarks read their flags
// first (a bad flag is reported on any machine), then ask gpusPresent: where
// the build has no CUDA or the machine too few GPUs, one JSON line says the
// benchmark skipped and why, and it exits 0: nothing was measured, nothing
// failed.
#include <fmt/core.h>

#include <string>

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tandem::bench {

inline void printSkipped(const std::string& bench, const std::string& why) {
  fmt::print("{{\"bench\":\"{}\",\"skipped\":\"{}\"}}\n", bench, why);
}

// True when this build has CUDA and the machine at least `gpus` GPUs; else
// prints the skipped line and returns false.
inline bool gpusPresent(const std::string& bench, int gpus = 1) {
#ifdef TANDEM_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices >= gpus) return true;
  printSkipped(bench, devices == 0 ? std::string("no GPU") : fmt::format("needs {} GPUs, found {}", gpus, devices));
#else
  (void)gpus;
  printSkipped(bench, "built without CUDA");
#endif
  return false;
}

}  // namespace tandem::bench
