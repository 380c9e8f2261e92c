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

#ifdef TANDEM_HAVE_CUDA
namespace {

// GPT-2 124M's hidden size and its MLP's width.
constexpr int64_t kHidden = 768, kFcWidth = 4 * kHidden;

// Device memory filled with `byte` (exits when there is not enough).
void* deviceBuffer(size_t bytes, int byte) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    fmt::print(stderr, "bench_gelu_gemm: cannot allocate {} bytes\n", bytes);
    std::exit(1);
  }
  cudaMemset(p, byte, bytes);  // non-zero operands: tensor cores draw less power on zeros
  return p;
}

// The operands both GEMMs share.
struct Operands {
  void* x;     // ln2 output / fc_proj's output gradient
  void* W;     // fc or fc_proj weight
  void* bias;
  void* pre;
  void* out;
};

struct Candidate {
  std::string op, impl;
  std::function<void()> launch;
  std::vector<double> us;
  std::vector<std::pair<uint64_t, uint64_t>> bursts;  // host ns, start and end of each timed burst
};

// `f` on our own GELU GEMM kernels, or on cuBLASLt's fused epilogues.
std::function<void()> onOwn(std::function<void()> f) {
  return [f] {
    tandem::cuda::setGeluGemmPath(tandem::cuda::GeluGemmPath::Own);
    f();
  };
}
std::function<void()> onCublasLt(std::function<void()> f) {
  return [f] {
    tandem::cuda::setGeluGemmPath(tandem::cuda::GeluGemmPath::CublasLt);
    f();
  };
}

// Per GEMM: cuBLASLt without the GELU epilogue, with it, and our own kernel.
std::vector<Candidate> geluCandidates(tandem::cuda::Gemm& gemm, const Operands& o, int64_t M, cudaStream_t s) {
  const tandem::DType bf = tandem::DType::BF16;
  const int64_t C = kHidden, F = kFcWidth;
  auto fwd_gelu = [&gemm, o, M, F, C, bf, s] { gemm.forwardGelu(o.out, o.pre, o.x, o.W, o.bias, M, F, C, bf, s); };
  auto bwd_gelu = [&gemm, o, M, F, C, bf, s] { gemm.backwardDataGelu(o.out, o.x, o.W, o.pre, M, C, F, bf, s); };
  auto fwd_bias = [&gemm, o, M, F, C, bf, s] { gemm.forward(o.out, o.x, o.W, o.bias, M, F, C, bf, s); };
  auto bwd_plain = [&gemm, o, M, F, C, bf, s] { gemm.backwardData(o.out, o.x, o.W, M, C, F, false, bf, s); };
  return {
      {"fc_forward", "cublaslt_bias", onCublasLt(fwd_bias), {}, {}},
      {"fc_forward", "cublaslt_gelu_aux_bias", onCublasLt(fwd_gelu), {}, {}},
      {"fc_forward", "own", onOwn(fwd_gelu), {}, {}},
      {"fc_proj_backward_data", "cublaslt_plain", onCublasLt(bwd_plain), {}, {}},
      {"fc_proj_backward_data", "cublaslt_dgelu", onCublasLt(bwd_gelu), {}, {}},
      {"fc_proj_backward_data", "own", onOwn(bwd_gelu), {}, {}},
  };
}

// The first call of each cuBLASLt shape tunes it (and waits, computing
// nothing); the executor turns tuning off after its first step, so here.
// False, having said why, on a CUDA error.
bool tuneCandidates(std::vector<Candidate>& cands, tandem::cuda::Gemm& gemm, cudaStream_t s) {
  for (Candidate& c : cands) c.launch();
  gemm.setTuning(false);
  if (cudaStreamSynchronize(s) != cudaSuccess) {
    fmt::print(stderr, "bench_gelu_gemm: CUDA error: {}\n", cudaGetErrorString(cudaGetLastError()));
    return false;
  }
  return true;
}

uint64_t hostNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

#ifdef TANDEM_HAVE_PROFILER
// NVML samples of this process's GPU every 2 ms; null without its PCI bus id.
std::unique_ptr<tandem::profiler::PowerSampler> startSampler() {
  std::unique_ptr<tandem::profiler::PowerSampler> sampler;
  char bus[32] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) == cudaSuccess)
    sampler = std::make_unique<tandem::profiler::PowerSampler>(bus, 2, hostNs);
  if (sampler && !sampler->active()) fmt::print(stderr, "bench_gelu_gemm: {}\n", sampler->note());
  return sampler;
}
#endif

// The candidates take turns in `rounds` rounds, each a warm launch and then
// `reps` launches timed by the events, so that all see the same clocks.
void timeRounds(std::vector<Candidate>& cands, int rounds, int reps, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
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
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#ifdef TANDEM_HAVE_PROFILER
// Per candidate, the clock and power samples taken inside its bursts, as
// the JSON keys its line ends with.
void addClockColumns(tandem::profiler::PowerSampler& sampler, const std::vector<Candidate>& cands,
                     std::vector<std::string>& clocks) {
  const std::vector<tandem::profiler::PowerSample> samples = sampler.stop();
  for (size_t i = 0; i < cands.size(); ++i) {
    std::vector<double> mhz;
    double watts = 0;
    int n_watts = 0;
    for (const tandem::profiler::PowerSample& p : samples)
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

// One line per candidate (its median round), then what the epilogues cost
// per step (12 layers) and what the own kernels save.
void printResults(const std::vector<Candidate>& cands, const std::vector<std::string>& clocks, int64_t M, int rounds,
                  int reps) {
  const int64_t C = kHidden, F = kFcWidth;
  const double flop = 2.0 * double(M) * double(F) * double(C);
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
}

}  // namespace
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
  const int64_t C = kHidden, F = kFcWidth;
  void* ws = deviceBuffer(cuda::Gemm::kWorkspaceBytes, 0);
  Operands o;
  o.x = deviceBuffer(size_t(M) * C * 2, 0x3c);
  o.W = deviceBuffer(size_t(F) * C * 2, 0x3c);
  o.bias = deviceBuffer(size_t(F) * 2, 0x3c);
  o.pre = deviceBuffer(size_t(M) * F * 2, 0x3c);
  o.out = deviceBuffer(size_t(M) * F * 2, 0);
  cudaStream_t s;
  cudaStreamCreate(&s);
  cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
  gemm.setTuning(true);

  std::vector<Candidate> cands = geluCandidates(gemm, o, M, s);
  if (!tuneCandidates(cands, gemm, s)) return 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
#ifdef TANDEM_HAVE_PROFILER
  std::unique_ptr<profiler::PowerSampler> sampler = startSampler();
#endif
  timeRounds(cands, rounds, reps, s, e0, e1);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fmt::print(stderr, "bench_gelu_gemm: CUDA error: {}\n", cudaGetErrorString(err));
    return 1;
  }
  // Per candidate, the clock and power samples taken inside its bursts.
  std::vector<std::string> clocks(cands.size());
#ifdef TANDEM_HAVE_PROFILER
  if (sampler && sampler->active()) addClockColumns(*sampler, cands, clocks);
#endif
  printResults(cands, clocks, M, rounds, reps);
  return 0;
#endif
}
