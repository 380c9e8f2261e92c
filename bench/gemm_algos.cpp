// bench_gemm_algos: for the matmuls of a GPT-2 124M step (micro-batch 16,
// sequence 1024, bf16), the time of cuBLASLt's first heuristic choice (what
// the executor uses) against the fastest of its top candidates, measured on
// the GPU. Says how much per-shape algorithm tuning could gain, per shape and
// per step. Prints one JSON object per line; the last line is the total.
// With --epilogues it times the two fused GELU GEMMs instead (the fc layer's
// forward with GELU_AUX_BIAS, its projection's data gradient with DGELU, and
// with DGELU_BGRAD, which also sums the fc bias gradient)
// beside the same GEMMs without the epilogue, and also every algorithm
// cuBLASLt lists for them (cublasLtMatmulAlgoGetIds, each tile and stage
// count its capabilities name), not just the heuristic's candidates.
//
// With --sustain-ms T each candidate first runs back to back for T ms before
// it is timed, so that it is timed at the clock the GPU holds under its own
// power draw (at the 700 W cap a GEMM that moves less data keeps a higher
// clock); --each prints every candidate's time.
//
//   bench_gemm_algos [--candidates N] [--reps N] [--sustain-ms T] [--each] [--epilogues [--max-configs N]]
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#endif

namespace {

// The executor's three matmuls in cuBLASLt's column-major terms (gemm.cpp):
// forward y^T = W^T x^T, data gradient dx^T = W dy^T, weight gradient
// dW^T = x^T dy.
struct Shape {
  const char* name;
  const char* kind;  // forward | backward_data | backward_weight
  long N, K;         // the weight is N x K
  int per_step;      // how many such matmuls a step runs
  bool bias;         // forward with the bias epilogue
  int epilogue = 0;  // 0 plain/bias, 1 GELU_AUX_BIAS (forward), 2 DGELU, 3 DGELU_BGRAD (backward data)
};

}  // namespace

int main(int argc, char** argv) {
  int candidates = 16, reps = 20, max_configs = 600;
  double sustain_ms = 0;
  bool epilogues = false, each = false;
  tandem::bench::ArgReader args(
      "bench_gemm_algos", "[--candidates N] [--reps N] [--sustain-ms T] [--each] [--epilogues [--max-configs N]]",
      argc, argv);
  while (args.next()) {
    if (args.is("--candidates")) candidates = int(args.integer(1, 1024));
    else if (args.is("--reps")) reps = int(args.integer(1, 1000000));
    else if (args.is("--max-configs")) max_configs = int(args.integer(1, 1000000));
    else if (args.is("--epilogues")) epilogues = true;
    else if (args.is("--sustain-ms")) sustain_ms = args.number(0, 600000);
    else if (args.is("--each")) each = true;
    else args.unknown();
  }
  if (!tandem::bench::gpusPresent("gemm_algos")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)candidates, (void)reps, (void)max_configs, (void)sustain_ms, (void)epilogues, (void)each;
#else
  const long M = 16 * 1024;  // tokens of one micro-batch
  const long C = 768, V = 50304;
  std::vector<Shape> shapes;
  if (epilogues) {
    shapes.push_back({"fc", "forward", 4 * C, C, 12, true, 0});
    shapes.push_back({"fc", "forward", 4 * C, C, 12, true, 1});
    shapes.push_back({"fc_proj", "backward_data", C, 4 * C, 12, false, 0});
    shapes.push_back({"fc_proj", "backward_data", C, 4 * C, 12, false, 2});
    shapes.push_back({"fc_proj", "backward_data", C, 4 * C, 12, false, 3});
  }
  for (const char* kind : {"forward", "backward_data", "backward_weight"}) {
    if (epilogues) break;
    const bool fwd = std::string(kind) == "forward";
    shapes.push_back({"qkv", kind, 3 * C, C, 12, fwd});
    shapes.push_back({"attn_proj", kind, C, C, 12, fwd});
    shapes.push_back({"fc", kind, 4 * C, C, 12, fwd});
    shapes.push_back({"fc_proj", kind, C, 4 * C, 12, fwd});
    shapes.push_back({"lm_head", kind, V, C, 1, false});
  }
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  const size_t ws_bytes = size_t(32) << 20;
  void *ws, *A, *B, *D, *bias, *aux;
  cudaMalloc(&ws, ws_bytes);
  cudaMalloc(&aux, size_t(4 * C) * M * 2);
  cudaMemset(aux, 0x3c, size_t(4 * C) * M * 2);
  cudaMalloc(&A, size_t(V) * M * 2);
  cudaMalloc(&B, size_t(V) * M * 2);
  cudaMalloc(&D, size_t(V) * M * 2);
  cudaMalloc(&bias, size_t(V) * 2);
  // Non-zero operands: tensor cores draw less power on zeros.
  cudaMemset(A, 0x3c, size_t(V) * M * 2);
  cudaMemset(B, 0x3c, size_t(V) * M * 2);
  cudaMemset(bias, 0, size_t(V) * 2);
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double total_first = 0, total_best = 0;
  for (const Shape& sh : shapes) {
    const std::string kind = sh.kind;
    bool ta, tb;
    long m, n, k, lda, ldb, ldd;
    if (kind == "forward") ta = true, tb = false, m = sh.N, n = M, k = sh.K, lda = sh.K, ldb = sh.K, ldd = sh.N;
    else if (kind == "backward_data")
      ta = false, tb = false, m = sh.K, n = M, k = sh.N, lda = sh.K, ldb = sh.N, ldd = sh.K;
    else ta = false, tb = true, m = sh.K, n = sh.N, k = M, lda = sh.K, ldb = sh.N, ldd = sh.K;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    if (sh.bias || sh.epilogue) {
      cublasLtEpilogue_t epi = sh.epilogue == 1   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                               : sh.epilogue == 2 ? CUBLASLT_EPILOGUE_DGELU
                               : sh.epilogue == 3 ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                                  : CUBLASLT_EPILOGUE_BIAS;
      cudaDataType_t bt = CUDA_R_16BF;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
      // DGELU_BGRAD writes the bias gradient (the row sums of its output) there.
      if (sh.epilogue != 2)
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      if (sh.epilogue) {
        const int64_t aux_ld = ldd;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
      }
    }
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t wsb = ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(candidates));
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, candidates, res.data(), &found);
    const float alpha = 1.f, beta = 0.f;
    double first_ms = 0, best_ms = 1e30;
    int best = -1;
    for (int c = 0; c < found; ++c) {
      auto launch = [&] {
        return cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res[size_t(c)].algo, ws,
                              ws_bytes, s);
      };
      if (launch() != CUBLAS_STATUS_SUCCESS) continue;
      for (int w = 0; w < 3; ++w) launch();
      float ms = 0;
      if (sustain_ms > 0) {
        // Back to back until sustain_ms have passed (in batches of 20, timed).
        double ran = 0;
        while (ran < sustain_ms) {
          cudaEventRecord(e0, s);
          for (int r = 0; r < 20; ++r) launch();
          cudaEventRecord(e1, s);
          cudaEventSynchronize(e1);
          cudaEventElapsedTime(&ms, e0, e1);
          ran += ms;
        }
      }
      cudaEventRecord(e0, s);
      for (int r = 0; r < reps; ++r) launch();
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&ms, e0, e1);
      const double per = ms / reps;
      if (each)
        fmt::print("{{\"shape\":\"{}\",\"kind\":\"{}\",\"candidate\":{},\"ms\":{:.4f}}}\n", sh.name, sh.kind, c, per);
      if (c == 0) first_ms = per;
      if (per < best_ms) best_ms = per, best = c;
    }
    // Every listed algorithm, tile and stage count (epilogue mode only): does
    // cuBLASLt have a faster kernel for the fused epilogue than its heuristic offers?
    int enumerated = 0;
    double enum_best_ms = 1e30;
    std::string enum_best;
    if (epilogues) {
      int ids[256], n_ids = 0;
      cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, 256, ids, &n_ids);
      for (int a = 0; a < n_ids && enumerated < max_configs; ++a) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
          continue;
        uint32_t tiles[128] = {}, stages[128] = {};
        size_t tiles_bytes = 0, stages_bytes = 0;
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof(tiles), &tiles_bytes);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof(stages),
                                          &stages_bytes);
        const size_t n_tiles = std::max<size_t>(1, tiles_bytes / sizeof(uint32_t));
        const size_t n_stages = std::max<size_t>(1, stages_bytes / sizeof(uint32_t));
        for (size_t t = 0; t < n_tiles && enumerated < max_configs; ++t)
          for (size_t g = 0; g < n_stages && enumerated < max_configs; ++g) {
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof(uint32_t));
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[g],
                                                 sizeof(uint32_t));
            cublasLtMatmulHeuristicResult_t check{};
            if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, ld, ld, &algo, &check) != CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > ws_bytes)
              continue;
            auto launch = [&] {
              return cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo, ws, ws_bytes, s);
            };
            if (launch() != CUBLAS_STATUS_SUCCESS) continue;
            ++enumerated;
            cudaEventRecord(e0, s);
            for (int r = 0; r < 3; ++r) launch();
            cudaEventRecord(e1, s);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (ms / 3 < enum_best_ms) {
              enum_best_ms = ms / 3;
              enum_best = fmt::format("id {} tile {} stages {}", ids[a], tiles[t], stages[g]);
            }
          }
      }
      cudaGetLastError();
    }
    const double tflops = 2.0 * m * n * k / (best_ms * 1e-3) / 1e12;
    const char* epi_name = sh.epilogue == 1   ? "gelu_aux_bias"
                           : sh.epilogue == 2 ? "dgelu"
                           : sh.epilogue == 3 ? "dgelu_bgrad"
                           : sh.bias          ? "bias"
                                              : "none";
    fmt::print("{{\"shape\":\"{}\",\"kind\":\"{}\",\"epilogue\":\"{}\",\"m\":{},\"n\":{},\"k\":{},\"candidates\":{},"
               "\"first_ms\":{:.4f},\"best_ms\":{:.4f},\"best_index\":{},\"gain\":{:.3f},\"best_tflops\":{:.0f},"
               "\"per_step\":{}",
               sh.name, sh.kind, epi_name, m, n, k, found, first_ms, best_ms, best, first_ms / best_ms, tflops,
               sh.per_step);
    if (epilogues)
      fmt::print(",\"enumerated\":{},\"enumerated_best_ms\":{:.4f},\"enumerated_best\":\"{}\"", enumerated,
                 enumerated ? enum_best_ms : 0.0, enum_best);
    fmt::print("}}\n");
    std::fflush(stdout);
    total_first += first_ms * sh.per_step;
    total_best += best_ms * sh.per_step;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
  fmt::print("{{\"total\":\"matmuls of one step\",\"first_heuristic_ms\":{:.3f},\"best_of_candidates_ms\":{:.3f},"
             "\"saving_ms\":{:.3f}}}\n",
             total_first, total_best, total_first - total_best);
  cublasLtDestroy(lt);
  return 0;
#endif
}
