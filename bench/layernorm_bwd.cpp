// bench_layernorm_bwd: GPT-2 124M's layernorm backward (16384 rows of 768,
// bf16, dx accumulating into the residual gradient) as the executor runs it,
// with the parameter sums (dw, db partials in registers, a fixed grid of two
// blocks per SM, then the column sums), against the same dx with the sums
// left out (three blocks per SM, one row per warp): what moving the
// parameter sums off the backward's critical path would gain. Also the
// variant that sums a bias gradient too (schedule.fuse_bias_gradients).
// Each variant: 24 launches (a step's worth) captured in one CUDA graph,
// replayed; the median replay per launch. Prints one JSON object per line.
// --rows/--width choose another shape; at widths up to 2048 the executor's
// variant is also timed on the block-per-row kernels that wider rows take
// (TANDEM_LAYERNORM=wide), in the same process, alternating; and the RMSNorm
// backward (the Llama family's: dx accumulating, no bias) likewise.
//
//   bench_layernorm_bwd [--reps N] [--rows M] [--width C]
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
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

int main(int argc, char** argv) {
  using namespace tandem;
  int reps = 20;
  int64_t M = 16384, C = 768;
  bench::ArgReader args("bench_layernorm_bwd", "[--reps N] [--rows M] [--width C]", argc, argv);
  while (args.next()) {
    if (args.is("--reps")) reps = int(args.integer(1, 1000000));
    else if (args.is("--rows")) M = args.integer(1, 1 << 20);
    else if (args.is("--width")) C = args.integer(8, 8192);
    else args.unknown();
  }
  if (!bench::gpusPresent("layernorm_bwd")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)reps, (void)M, (void)C;
#else
  try {
    constexpr int kLaunches = 24;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    auto upload = [&](size_t n, bool bf16, float mean_of = 0.f) {
      void* p = nullptr;
      TANDEM_CUDA_CHECK(cudaMalloc(&p, n * (bf16 ? 2 : 4)));
      if (bf16) {
        std::vector<uint16_t> h(n);
        for (auto& v : h) v = floatToBf16Bits(mean_of + normal(rng));
        TANDEM_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
      } else {
        std::vector<float> h(n);
        for (auto& v : h) v = mean_of + 0.1f * normal(rng);
        TANDEM_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
      }
      return p;
    };
    // Separate tensors per launch, as in a step (the 100 MB each launch
    // touches does not stay in L2 anyway).
    struct Rows {
      void *dx, *dy, *x, *mean, *rstd;
    };
    std::vector<Rows> rows;
    for (int i = 0; i < kLaunches; ++i)
      rows.push_back({upload(M * C, true), upload(M * C, true), upload(M * C, true), upload(M, false),
                      upload(M, false, 1.f)});
    void* w = upload(C, true, 1.f);
    void *dw = upload(C, true), *db = upload(C, true), *dbias = upload(C, true);
    float* scratch = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&scratch, cuda::layernormScratchBytes(C, true)));
    cudaStream_t s;
    TANDEM_CUDA_CHECK(cudaStreamCreate(&s));
    cuda::prepareKernels();

    std::string path = "default";  // TANDEM_LAYERNORM while capturing, printed with the figures
    auto timeVariant = [&](const char* name, const std::function<void(const Rows&)>& launch) {
      const bench::ReplayTimes t = bench::replayUsPerLaunch(s, kLaunches, reps, [&] {
        for (const Rows& r : rows) launch(r);
      });
      const double med = t.median_us;
      const double bytes = 4.0 * M * C * 2;  // x, dy, dx read; dx written
      fmt::print("{{\"bench\":\"layernorm_bwd\",\"variant\":\"{}\",\"kernels\":\"{}\",\"rows\":{},\"width\":{},"
                 "\"us_per_launch\":{:.2f},\"min_us\":{:.2f},\"tb_per_s\":{:.2f},\"launches_per_step\":{}}}\n",
                 name, path, M, C, med, t.min_us, bytes / (med * 1e-6) / 1e12, kLaunches);
      std::fflush(stdout);
    };
    timeVariant("with parameter sums (executor)", [&](const Rows& r) {
      cuda::layernormBackward(r.dx, dw, db, nullptr, r.dy, r.x, w, r.mean, DType::F32, r.rstd, DType::F32, M, C, true,
                              false, DType::BF16, scratch, s);
    });
    timeVariant("with parameter and bias sums (fuse_bias_gradients)", [&](const Rows& r) {
      cuda::layernormBackward(r.dx, dw, db, dbias, r.dy, r.x, w, r.mean, DType::F32, r.rstd, DType::F32, M, C, true,
                              false, DType::BF16, scratch, s);
    });
    // The data-only kernel keeps a row in registers: three 8-element
    // vectors per lane, rows of up to 768 bf16.
    if (C <= 3 * 8 * 32 && C % 8 == 0)
      timeVariant("dx alone", [&](const Rows& r) {
        cuda::layernormBackwardDataOnly(r.dx, r.dy, r.x, w, r.mean, DType::F32, r.rstd, DType::F32, M, C, true,
                                        DType::BF16, s);
      });
    else
      fmt::print(stderr, "bench_layernorm_bwd: dx alone not timed: its kernel takes rows of up to 768\n");
    timeVariant("with parameter sums (executor), again", [&](const Rows& r) {
      cuda::layernormBackward(r.dx, dw, db, nullptr, r.dy, r.x, w, r.mean, DType::F32, r.rstd, DType::F32, M, C, true,
                              false, DType::BF16, scratch, s);
    });
    if (C <= 2048 && C % 8 == 0) {
      // The same rows on the warp-per-row and the block-per-row kernels,
      // alternating three times.
      for (int round = 0; round < 3; ++round)
        for (const char* p : {"warp", "wide"}) {
          setenv("TANDEM_LAYERNORM", p, 1);
          path = p;
          timeVariant("with parameter sums (executor)", [&](const Rows& r) {
            cuda::layernormBackward(r.dx, dw, db, nullptr, r.dy, r.x, w, r.mean, DType::F32, r.rstd, DType::F32, M,
                                    C, true, false, DType::BF16, scratch, s);
          });
        }
      // RMSNorm's backward on the same rows (its warp kernel is the
      // layernorm's), alternating the same way.
      float* rms_scratch = nullptr;
      TANDEM_CUDA_CHECK(cudaMalloc(&rms_scratch, cuda::rmsnormScratchBytes(C)));
      for (int round = 0; round < 3; ++round)
        for (const char* p : {"warp", "wide"}) {
          setenv("TANDEM_LAYERNORM", p, 1);
          path = p;
          timeVariant("rmsnorm with weight sums (executor)", [&](const Rows& r) {
            cuda::rmsnormBackward(r.dx, dw, r.dy, r.x, w, r.rstd, DType::F32, M, C, true, false, DType::BF16,
                                  rms_scratch, s);
          });
        }
      TANDEM_CUDA_CHECK(cudaFree(rms_scratch));
      unsetenv("TANDEM_LAYERNORM");
      path = "default";
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_layernorm_bwd: error: {}\n", e.what());
    return 1;
  }
#endif
}
