// bench_gelu_gemm: the fc layer's two GEMMs with GELU epilogues on GPT-2
// 124M's shapes (micro-batch 16, sequence 1024, bf16), through the
// executor's Gemm: cuBLASLt's fused epilogues (GELU_AUX_BIAS forward, DGELU
// data gradient; tuned as the executor tunes them) against our own wgmma
// kernels (gemm_gelu.cu), beside cuBLASLt's same
// GEMMs without the epilogue. The candidates of one GEMM take turns in
// rounds, each timed over --reps back-to-back launches, so that all see the
// same clocks; the median round is printed. One JSON object per line; the
// last lines say what the own kernels save per step (12 layers).
// Where NVML is there, each line also has the median SM clock and the mean
// board power sampled (every 2 ms) while that candidate's launches ran: at
// the power limit a kernel's time follows its energy, and the clock says
// which candidates it held down.
//
//   bench_gelu_gemm [--reps N] [--rounds N] [--tokens N]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/gemm.h"
#include "engine/cuda/gemm_gelu.h"
#include "engine/cuda/kernels.h"
#endif
#ifdef TANDEM_HAVE_PROFILER
#include "profiler/power_sampler.h"
#endif

int main(int argc, char** argv) {
  using namespace tandem;
  int reps = 50, rounds = 7;
  int64_t M = 16 * 1024;
  bench::ArgReader args("bench_gelu_gemm", "[--reps N] [--rounds N] [--tokens N]", argc, argv);
  while (args.next()) {
    if (args.is("--reps")) reps = int(args.integer(1, 100000));
    else if (args.is("--rounds")) rounds = int(args.integer(1, 1000));
    else if (args.is("--tokens")) M = args.integer(128, int64_t(1) << 20);
    else args.unknown();
  }
  if (!bench::gpusPresent("gelu_gemm")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)reps, (void)rounds, (void)M;
#else
  cuda::prepareKernels();
  if (!cuda::ownGeluGemmLoaded()) {
    bench::printSkipped("gelu_gemm", "no sm_90a code for this device");
    return 0;
  }
  if (!cuda::ownGeluGemmFits(M, 3072, 768)) {
    fmt::print(stderr, "bench_gelu_gemm: --tokens must be a multiple of 128\n");
    return 2;
  }
  const int64_t C = 768, F = 4 * C;
  auto alloc = [](size_t bytes, int byte) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      fmt::print(stderr, "bench_gelu_gemm: cannot allocate {} bytes\n", bytes);
      std::exit(1);
    }
    cudaMemset(p, byte, bytes);  // non-zero operands: tensor cores draw less power on zeros
    return p;
  };
  void* ws = alloc(cuda::Gemm::kWorkspaceBytes, 0);
  void* x = alloc(size_t(M) * C * 2, 0x3c);     // ln2 output / fc_proj's output gradient
  void* W = alloc(size_t(F) * C * 2, 0x3c);     // fc or fc_proj weight
  void* bias = alloc(size_t(F) * 2, 0x3c);
  void* pre = alloc(size_t(M) * F * 2, 0x3c);
  void* out = alloc(size_t(M) * F * 2, 0);
  cudaStream_t s;
  cudaStreamCreate(&s);
  cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
  gemm.setTuning(true);

  struct Candidate {
    std::string op, impl;
    std::function<void()> launch;
    std::vector<double> us;
    std::vector<std::pair<uint64_t, uint64_t>> bursts;  // host ns, start and end of each timed burst
  };
  auto own = [](std::function<void()> f) {
    return [f] {
      cuda::setGeluGemmPath(cuda::GeluGemmPath::Own);
      f();
    };
  };
  auto lt = [](std::function<void()> f) {
    return [f] {
      cuda::setGeluGemmPath(cuda::GeluGemmPath::CublasLt);
      f();
    };
  };
  const DType bf = DType::BF16;
  auto fwd_gelu = [&] { gemm.forwardGelu(out, pre, x, W, bias, M, F, C, bf, s); };
  auto bwd_gelu = [&] { gemm.backwardDataGelu(out, x, W, pre, M, C, F, bf, s); };
  std::vector<Candidate> cands = {
      {"fc_forward", "cublaslt_bias", lt([&] { gemm.forward(out, x, W, bias, M, F, C, bf, s); }), {}, {}},
      {"fc_forward", "cublaslt_gelu_aux_bias", lt(fwd_gelu), {}, {}},
      {"fc_forward", "own", own(fwd_gelu), {}, {}},
      {"fc_proj_backward_data", "cublaslt_plain", lt([&] { gemm.backwardData(out, x, W, M, C, F, false, bf, s); }),
       {}, {}},
      {"fc_proj_backward_data", "cublaslt_dgelu", lt(bwd_gelu), {}, {}},
      {"fc_proj_backward_data", "own", own(bwd_gelu), {}, {}},
  };
  // The first call of each cuBLASLt shape tunes it (and waits, computing
  // nothing); the executor turns tuning off after its first step, so here.
  for (Candidate& c : cands) c.launch();
  gemm.setTuning(false);
  if (cudaStreamSynchronize(s) != cudaSuccess) {
    fmt::print(stderr, "bench_gelu_gemm: CUDA error: {}\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto hostNs = [] {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count());
  };
#ifdef TANDEM_HAVE_PROFILER
  std::unique_ptr<profiler::PowerSampler> sampler;
  {
    char bus[32] = {};
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) == cudaSuccess)
      sampler = std::make_unique<profiler::PowerSampler>(bus, 2, hostNs);
    if (sampler && !sampler->active()) fmt::print(stderr, "bench_gelu_gemm: {}\n", sampler->note());
  }
#endif
  for (int r = 0; r < rounds; ++r) {
    for (Candidate& c : cands) {
      c.launch();  // warm
      cudaStreamSynchronize(s);
      const uint64_t t0 = hostNs();
      cudaEventRecord(e0, s);
      for (int i = 0; i < reps; ++i) c.launch();
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      c.bursts.push_back({t0, hostNs()});
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      c.us.push_back(1000.0 * ms / reps);
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fmt::print(stderr, "bench_gelu_gemm: CUDA error: {}\n", cudaGetErrorString(err));
    return 1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double flop = 2.0 * double(M) * double(F) * double(C);
  // Per candidate, the clock and power samples taken inside its bursts.
  std::vector<std::string> clocks(cands.size());
#ifdef TANDEM_HAVE_PROFILER
  if (sampler && sampler->active()) {
    const std::vector<profiler::PowerSample> samples = sampler->stop();
    for (size_t i = 0; i < cands.size(); ++i) {
      std::vector<double> mhz;
      double watts = 0;
      int n_watts = 0;
      for (const profiler::PowerSample& p : samples)
        for (const auto& [b0, b1] : cands[i].bursts)
          if (p.ts >= b0 && p.ts <= b1) {
            if (p.sm_clock_mhz > 0) mhz.push_back(p.sm_clock_mhz);
            if (p.power_w > 0) watts += p.power_w, ++n_watts;
          }
      if (!mhz.empty())
        clocks[i] = fmt::format(",\"sm_clock_mhz\":{:.0f},\"power_w\":{:.0f},\"samples\":{}", median(mhz),
                                n_watts ? watts / n_watts : -1.0, mhz.size());
    }
  }
#endif
  std::vector<double> med;
  for (size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    med.push_back(median(c.us));
    fmt::print("{{\"bench\":\"gelu_gemm\",\"op\":\"{}\",\"impl\":\"{}\",\"m\":{},\"n\":{},\"k\":{},\"us\":{:.2f},"
               "\"tflops\":{:.1f},\"rounds\":{},\"reps\":{}{}}}\n",
               c.op, c.impl, M, F, C, med.back(), flop / med.back() / 1e6, rounds, reps, clocks[i]);
  }
  fmt::print("{{\"bench\":\"gelu_gemm\",\"summary\":\"per step, 12 layers\","
             "\"forward_epilogue_cost_cublaslt_ms\":{:.3f},"
             "\"forward_epilogue_cost_own_ms\":{:.3f},\"backward_epilogue_cost_cublaslt_ms\":{:.3f},"
             "\"backward_epilogue_cost_own_ms\":{:.3f},\"own_saves_ms\":{:.3f}}}\n",
             12e-3 * (med[1] - med[0]), 12e-3 * (med[2] - med[0]), 12e-3 * (med[4] - med[3]),
             12e-3 * (med[5] - med[3]), 12e-3 * ((med[1] - med[2]) + (med[4] - med[5])));
  return 0;
#endif
}
