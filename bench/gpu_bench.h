#pragma once
// Whether a GPU benchmark can run here. The benchmarks read their flags
// first (a bad flag is reported on any machine), then ask gpusPresent: where
// the build has no CUDA or the machine too few GPUs, one JSON line says the
// benchmark skipped and why, and it exits 0: nothing was measured, nothing
// failed.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/check.h"
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

#ifdef TANDEM_HAVE_CUDA
// capture() issues `launches` kernels on s (a step's worth); they are
// captured into one CUDA graph and replayed reps times after two replays
// that warm up: the median and the fastest replay's time per launch, in
// microseconds (graph replays: no launch gaps between the kernels).
struct ReplayTimes {
  double median_us = 0, min_us = 0;
};
inline ReplayTimes replayUsPerLaunch(cudaStream_t s, int launches, int reps, const std::function<void()>& capture) {
  cudaGraph_t graph;
  TANDEM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  capture();
  TANDEM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  TANDEM_CUDA_CHECK(cudaEventCreate(&a));
  TANDEM_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < reps + 2; ++i) {
    TANDEM_CUDA_CHECK(cudaEventRecord(a, s));
    TANDEM_CUDA_CHECK(cudaGraphLaunch(exec, s));
    TANDEM_CUDA_CHECK(cudaEventRecord(b, s));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) us.push_back(1e3 * ms / launches);
  }
  TANDEM_CUDA_CHECK(cudaEventDestroy(a));
  TANDEM_CUDA_CHECK(cudaEventDestroy(b));
  TANDEM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front()};
}
#endif

}  // namespace tandem::bench
