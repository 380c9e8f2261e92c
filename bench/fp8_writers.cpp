// bench_fp8_writers: the kernels that write FP8 GEMM operands in both
// layouts (a cast, SwiGLU forward and backward, RMSNorm forward; row-major
// and transposed codes from one tile through shared memory), each against
// its bf16 twin reading and writing the same bytes (a copy of the bf16
// tensor for the cast), at the 1.1B Llama's shapes by default (16384 tokens,
// width 2048, SwiGLU width 5632). Every tile shape the writers take
// (TANDEM_FP8_TILE: 64x64, 32x128, 128x64) and both walks over them
// (TANDEM_FP8_WRITER: a block per tile, or resident blocks looping) are
// timed in the same process, alternating over rounds. RMSNorm's previous path (codes by rows, then a
// transpose) and its one-kernel variants (TANDEM_RMSNORM_FP8=blocks,
// smem) are timed beside its tiled one. Each variant: 8 launches on
// separate tensors (as a step's layers, out of L2) in one CUDA graph,
// replayed; the median replay per launch. One JSON object per line, then
// one summary line per kernel and tile: median over rounds, and the bf16
// twin's time over it (1.0: the FP8 writer is as fast as bf16 writing the
// same bytes).
//
//   bench_fp8_writers [--reps N] [--rounds N] [--rows M] [--width C] [--ffn F]
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/check.h"
#include "engine/cuda/kernels.h"
#include "engine/numerics/bf16.h"
#endif

#ifdef TANDEM_HAVE_CUDA
namespace {

using namespace tandem;

constexpr int kLaunches = 8;

struct Shape {
  int64_t M = 16384, C = 2048, F = 5632;
};

// One launch's tensors: the inputs (bf16) and the outputs (FP8 in both
// layouts, or bf16).
struct Set {
  void *x, *gate_up, *dy_ffn, *out, *out_t, *out_bf16, *rstd;
};

void* deviceAlloc(int64_t bytes) {
  void* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, size_t(bytes)));
  return p;
}

class WriterBench {
 public:
  WriterBench(Shape shape, int reps) : sh_(shape), reps_(reps) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.f, 1.f);
    // Normal values, drawn once per size: each launch's tensors hold the
    // same values at other addresses.
    std::map<int64_t, std::vector<uint16_t>> drawn;
    auto uploadBf16 = [&](int64_t n, float mean_of) {
      std::vector<uint16_t>& h = drawn[n];
      if (h.empty()) {
        h.resize(static_cast<size_t>(n));
        for (auto& v : h) v = floatToBf16Bits(mean_of + normal(rng));
      }
      void* p = deviceAlloc(2 * n);
      TANDEM_CUDA_CHECK(cudaMemcpy(p, h.data(), size_t(2 * n), cudaMemcpyHostToDevice));
      return p;
    };
    const int64_t M = sh_.M, widest = std::max(sh_.C, 2 * sh_.F);
    for (int i = 0; i < kLaunches; ++i)
      sets_.push_back({uploadBf16(M * sh_.C, 0.f), uploadBf16(M * 2 * sh_.F, 0.f), uploadBf16(M * sh_.F, 0.f),
                       deviceAlloc(M * widest), deviceAlloc(M * widest), deviceAlloc(2 * M * widest),
                       deviceAlloc(4 * M)});
    w_ = uploadBf16(sh_.C, 1.f);
    // One delayed-scaling key: scale 1 (the values are O(1)), its amax and
    // the slots for 1 / scale.
    auto* key = static_cast<float*>(deviceAlloc(4 * 4));
    const float init[4] = {1.f, 0.f, 1.f, 1.f};
    TANDEM_CUDA_CHECK(cudaMemcpy(key, init, sizeof init, cudaMemcpyHostToDevice));
    wr_.format = Fp8Format::E4M3;
    wr_.scale = key;
    wr_.amax = reinterpret_cast<unsigned*>(key + 1);
    wr_.scale_inv = key + 2;
    wr_.scale_inv_t = key + 3;
    wr_grad_ = wr_;
    wr_grad_.format = Fp8Format::E5M2;
    TANDEM_CUDA_CHECK(cudaStreamCreate(&s_));
    cuda::prepareKernels();
  }

  void round(int r) {
    const int64_t M = sh_.M, C = sh_.C, F = sh_.F;
    const double mc = double(M) * double(C), mf = double(M) * double(F);
    // The bf16 twins: the same bytes read and written.
    unsetenv("TANDEM_FP8_TILE");
    record("cast", "bf16 copy", "-", r, 4 * mc, [&](const Set& st) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(st.out_bf16, st.x, size_t(2 * M * C), cudaMemcpyDeviceToDevice, s_));
    });
    record("swiglu", "bf16", "-", r, 6 * mf,
           [&](const Set& st) { cuda::swigluForward(st.out_bf16, st.gate_up, M, F, DType::BF16, s_); });
    record("swiglu_bwd", "bf16", "-", r, 10 * mf, [&](const Set& st) {
      cuda::swigluBackward(st.out_bf16, st.dy_ffn, st.gate_up, M, F, false, DType::BF16, s_);
    });
    record("rmsnorm", "bf16", "-", r, 4 * mc, [&](const Set& st) {
      cuda::rmsnormForward(st.out_bf16, st.rstd, DType::F32, st.x, w_, M, C, DType::BF16, s_);
    });
    record("rmsnorm", "fp8 rows, then transposed", "-", r, 4 * mc, [&](const Set& st) {
      cuda::rmsnormForwardFp8(st.out, nullptr, st.rstd, DType::F32, st.x, w_, M, C, DType::BF16, wr_, s_);
      cuda::transposeBytes(st.out_t, st.out, M, C, s_);
    });
    setenv("TANDEM_RMSNORM_FP8", "blocks", 1);  // one kernel, 32-row blocks (llama.cu)
    record("rmsnorm", "fp8 both layouts, 32-row blocks", "32x128", r, 4 * mc, [&](const Set& st) {
      cuda::rmsnormForwardFp8(st.out, st.out_t, st.rstd, DType::F32, st.x, w_, M, C, DType::BF16, wr_, s_);
    });
    setenv("TANDEM_RMSNORM_FP8", "smem", 1);  // one kernel, one read, the rows in shared memory (llama.cu)
    record("rmsnorm", "fp8 both layouts, rows in shared memory", "16 rows", r, 4 * mc, [&](const Set& st) {
      cuda::rmsnormForwardFp8(st.out, st.out_t, st.rstd, DType::F32, st.x, w_, M, C, DType::BF16, wr_, s_);
    });
    unsetenv("TANDEM_RMSNORM_FP8");
    for (const char* walk : {"tiles", "loop"}) {
      setenv("TANDEM_FP8_WRITER", walk, 1);
      const std::string variant = std::string("fp8 both layouts, ") + walk;
      for (const char* tile : {"64x64", "32x128", "128x64"}) {
        setenv("TANDEM_FP8_TILE", tile, 1);
        record("cast", variant, tile, r, 4 * mc, [&](const Set& st) {
          cuda::fp8CastTransposeDelayed(st.out, st.out_t, st.x, DType::BF16, M, C, wr_grad_, s_);
        });
        record("swiglu", variant, tile, r, 6 * mf, [&](const Set& st) {
          cuda::swigluForwardFp8(st.out, st.out_t, st.gate_up, M, F, DType::BF16, wr_, s_);
        });
        record("swiglu_bwd", variant, tile, r, 10 * mf, [&](const Set& st) {
          cuda::swigluBackwardFp8(st.out, st.out_t, st.dy_ffn, st.gate_up, M, F, DType::BF16, wr_grad_, s_);
        });
        record("rmsnorm", variant, tile, r, 4 * mc, [&](const Set& st) {
          cuda::rmsnormForwardFp8(st.out, st.out_t, st.rstd, DType::F32, st.x, w_, M, C, DType::BF16, wr_, s_);
        });
      }
    }
    unsetenv("TANDEM_FP8_TILE");
    unsetenv("TANDEM_FP8_WRITER");
  }

  // Per kernel and tile: the median over rounds against the bf16 twin's.
  void summarize() const {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (const auto& [kernel, variants] : times_) {
      const double bf16_us = median(variants.at(kernel == "cast" ? "bf16 copy" : "bf16").at("-"));
      for (const auto& [variant, tiles] : variants)
        for (const auto& [tile, us] : tiles) {
          const double med = median(us);
          fmt::print("{{\"bench\":\"fp8_writers\",\"summary\":\"{}\",\"variant\":\"{}\",\"tile\":\"{}\","
                     "\"median_us\":{:.2f},\"tb_per_s\":{:.2f},\"bf16_twin_us\":{:.2f},\"twin_over_this\":{:.3f},"
                     "\"rounds\":{}}}\n",
                     kernel, variant, tile, med, bytes_.at(kernel) / (med * 1e-6) / 1e12, bf16_us, bf16_us / med,
                     us.size());
        }
    }
  }

 private:
  // The median replay, per launch, of a graph of the launch on every set.
  double time(const std::function<void(const Set&)>& launch) {
    return bench::replayUsPerLaunch(s_, kLaunches, reps_, [&] {
             for (const Set& st : sets_) launch(st);
           }).median_us;
  }

  void record(const std::string& kernel, const std::string& variant, const std::string& tile, int r, double bytes,
              const std::function<void(const Set&)>& launch) {
    const double us = time(launch);
    times_[kernel][variant][tile].push_back(us);
    bytes_[kernel] = bytes;
    fmt::print("{{\"bench\":\"fp8_writers\",\"kernel\":\"{}\",\"variant\":\"{}\",\"tile\":\"{}\",\"round\":{},"
               "\"rows\":{},\"cols\":{},\"us_per_launch\":{:.2f},\"tb_per_s\":{:.2f}}}\n",
               kernel, variant, tile, r + 1, sh_.M, kernel == "cast" || kernel == "rmsnorm" ? sh_.C : sh_.F, us,
               bytes / (us * 1e-6) / 1e12);
    std::fflush(stdout);
  }

  Shape sh_;
  int reps_;
  std::vector<Set> sets_;
  void* w_ = nullptr;
  cuda::Fp8Write wr_, wr_grad_;
  cudaStream_t s_ = nullptr;
  // kernel -> variant -> tile -> the rounds' times.
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<double>>>> times_;
  std::map<std::string, double> bytes_;  // the bytes a kernel's launch reads and writes
};

}  // namespace
#endif

int main(int argc, char** argv) {
  int reps = 20, rounds = 3;
  int64_t M = 16384, C = 2048, F = 5632;
  tandem::bench::ArgReader args("bench_fp8_writers", "[--reps N] [--rounds N] [--rows M] [--width C] [--ffn F]", argc,
                                argv);
  while (args.next()) {
    if (args.is("--reps")) reps = int(args.integer(1, 1000000));
    else if (args.is("--rounds")) rounds = int(args.integer(1, 100));
    else if (args.is("--rows")) M = args.integer(4, 1 << 20);
    else if (args.is("--width")) C = args.integer(8, 65536);
    else if (args.is("--ffn")) F = args.integer(8, 65536);
    else args.unknown();
  }
  if (M % 4 != 0 || C % 8 != 0 || F % 8 != 0) {
    fmt::print(stderr, "bench_fp8_writers: --rows must be a multiple of 4, --width and --ffn of 8\n");
    return 2;
  }
  if (!tandem::bench::gpusPresent("fp8_writers")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)reps, (void)rounds, (void)M, (void)C, (void)F;
#else
  try {
    WriterBench bench(Shape{M, C, F}, reps);
    for (int r = 0; r < rounds; ++r) bench.round(r);
    bench.summarize();
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_fp8_writers: {}\n", e.what());
    return 1;
  }
#endif
  return 0;
}
