// bench_lm_head_chunks: GPT-2 124M's LM head and cross-entropy (16384 tokens
// x 50304 logits, bf16) as the executor runs them today, one GEMM writing
// 1.65 GB of logits and one cross-entropy kernel reading them back, against
// the same work in chunks of R tokens, each chunk's GEMM followed at once by
// its cross-entropy while the chunk's logits (R x 50304 x 2 bytes) are still
// in L2. Says whether chunking pays before the plan learns it. Each variant
// is one CUDA graph, replayed; prints one JSON object per line.
//
//   bench_lm_head_chunks [--reps N]
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/cuda/device.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#endif

int main(int argc, char** argv) {
  using namespace tandem;
  int reps = 10;
  bench::ArgReader args("bench_lm_head_chunks", "[--reps N]", argc, argv);
  while (args.next()) {
    if (args.is("--reps")) reps = int(args.integer(1, 1000000));
    else args.unknown();
  }
  if (!bench::gpusPresent("lm_head_chunks")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)reps;
#else
  const int64_t M = 16 * 1024, V = 50304, C = 768;
  // Random operands (a fixed LCG): tensor cores draw less power on constants.
  std::vector<__nv_bfloat16> hx(size_t(M * C)), hw(size_t(V * C));
  uint64_t state = 12345;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float((state >> 40) & 0xFFFFFF) / float(0x1000000) - 0.5f;
  };
  for (auto& v : hx) v = __float2bfloat16(2.0f * uniform());
  for (auto& v : hw) v = __float2bfloat16(0.04f * uniform());
  std::vector<int32_t> ht(static_cast<size_t>(M));
  for (auto& t : ht) t = int32_t((uniform() + 0.5f) * 50257) % 50257;

  void *x, *w, *logits, *ws, *losses;
  int32_t* targets;
  float *scratch, *loss_sum;
  cudaMalloc(&x, hx.size() * 2);
  cudaMalloc(&w, hw.size() * 2);
  cudaMalloc(&logits, size_t(M * V) * 2);
  cudaMalloc(&targets, size_t(M) * 4);
  cudaMalloc(&losses, size_t(M) * 4);
  cudaMalloc(&scratch, size_t(cuda::crossEntropyScratchBytes(M)));
  cudaMalloc(&loss_sum, 4);
  cudaMalloc(&ws, cuda::Gemm::kWorkspaceBytes);
  cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(targets, ht.data(), ht.size() * 4, cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
  const float scale = 1.0f / float(M);
  auto* lg = static_cast<__nv_bfloat16*>(logits);

  // rows = 0: the executor's way (one GEMM, then one cross-entropy).
  // what: 0 both, 1 the GEMMs only, 2 the cross-entropies only.
  auto enqueue = [&](int64_t rows, int what) {
    const int64_t r = rows == 0 ? M : rows;
    if (what != 2)
      for (int64_t r0 = 0; r0 < M; r0 += r) {
        gemm.forward(lg + r0 * V, static_cast<__nv_bfloat16*>(x) + r0 * C, w, nullptr, std::min(r, M - r0), V, C,
                     DType::BF16, s);
        if (what == 0 && rows != 0)
          cuda::crossEntropy(static_cast<float*>(losses) + r0, DType::F32, lg + r0 * V, lg + r0 * V, targets + r0,
                             std::min(r, M - r0), V, scale, DType::BF16, nullptr, scratch, s);
      }
    if (what == 2 || (what == 0 && rows == 0))
      for (int64_t r0 = 0; r0 < M; r0 += r)
        cuda::crossEntropy(static_cast<float*>(losses) + r0, DType::F32, lg + r0 * V, lg + r0 * V, targets + r0,
                           std::min(r, M - r0), V, scale, DType::BF16, nullptr, scratch, s);
  };
  auto timeGraph = [&](int64_t rows, int what) {
    gemm.setTuning(true);  // times each new GEMM shape's algorithms; launches nothing
    enqueue(rows, what);
    gemm.setTuning(false);
    cudaStreamSynchronize(s);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    enqueue(rows, what);
    cudaStreamEndCapture(s, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < reps + 3; ++i) {
      cudaEventRecord(e0, s);
      cudaGraphLaunch(exec, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return double(ms[ms.size() / 2]);
  };
  double base_total = 0;
  for (int64_t rows : {int64_t(0), int64_t(2048), int64_t(1024), int64_t(512), int64_t(256), int64_t(128)}) {
    const double total = timeGraph(rows, 0), gemms = timeGraph(rows, 1), ce = timeGraph(rows, 2);
    if (rows == 0) base_total = total;
    const cudaError_t err = cudaGetLastError();
    fmt::print("{{\"bench\":\"lm_head_chunks\",\"chunk_rows\":{},\"chunks\":{},\"total_ms\":{:.4f},\"gemms_ms\":{:.4f},"
               "\"cross_entropy_ms\":{:.4f},\"cross_entropy_alone_ms\":{:.4f},\"vs_unchunked\":{:.3f},"
               "\"cuda\":\"{}\"}}\n",
               rows == 0 ? M : rows, rows == 0 ? 1 : M / rows, total, gemms, total - gemms, ce,
               base_total / total, cudaGetErrorString(err));
    std::fflush(stdout);
  }
  return 0;
#endif
}
