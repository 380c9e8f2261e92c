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

struct Options {
  int candidates = 16, reps = 20, max_configs = 600;
  double sustain_ms = 0;
  bool epilogues = false, each = false;
};

// The flags (a bad one exits with status 2).
Options parseOptions(int argc, char** argv) {
  Options o;
  tandem::bench::ArgReader args(
      "bench_gemm_algos", "[--candidates N] [--reps N] [--sustain-ms T] [--each] [--epilogues [--max-configs N]]",
      argc, argv);
  while (args.next()) {
    if (args.is("--candidates")) o.candidates = int(args.integer(1, 1024));
    else if (args.is("--reps")) o.reps = int(args.integer(1, 1000000));
    else if (args.is("--max-configs")) o.max_configs = int(args.integer(1, 1000000));
    else if (args.is("--epilogues")) o.epilogues = true;
    else if (args.is("--sustain-ms")) o.sustain_ms = args.number(0, 600000);
    else if (args.is("--each")) o.each = true;
    else args.unknown();
  }
  return o;
}

#ifdef TANDEM_HAVE_CUDA
const long M = 16 * 1024;  // tokens of one micro-batch
const long C = 768, V = 50304;

// The shapes timed: the fused GELU GEMMs beside their plain forms
// (--epilogues), or every matmul of a step.
std::vector<Shape> shapesToTime(bool epilogues) {
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
  return shapes;
}

// The handle, workspace, operands (sized for the largest shape), stream and
// timing events every shape shares.
struct Gpu {
  cublasLtHandle_t lt;
  size_t ws_bytes = size_t(32) << 20;
  void *ws, *A, *B, *D, *bias, *aux;
  cudaStream_t s;
  cudaEvent_t e0, e1;
};

Gpu createGpu() {
  Gpu g;
  cublasLtCreate(&g.lt);
  cudaMalloc(&g.ws, g.ws_bytes);
  cudaMalloc(&g.aux, size_t(4 * C) * M * 2);
  cudaMemset(g.aux, 0x3c, size_t(4 * C) * M * 2);
  cudaMalloc(&g.A, size_t(V) * M * 2);
  cudaMalloc(&g.B, size_t(V) * M * 2);
  cudaMalloc(&g.D, size_t(V) * M * 2);
  cudaMalloc(&g.bias, size_t(V) * 2);
  // Non-zero operands: tensor cores draw less power on zeros.
  cudaMemset(g.A, 0x3c, size_t(V) * M * 2);
  cudaMemset(g.B, 0x3c, size_t(V) * M * 2);
  cudaMemset(g.bias, 0, size_t(V) * 2);
  cudaStreamCreate(&g.s);
  cudaEventCreate(&g.e0);
  cudaEventCreate(&g.e1);
  return g;
}

// A shape's matmul in cuBLASLt's column-major terms: transposes, sizes and
// leading dimensions.
struct Problem {
  bool ta, tb;
  long m, n, k, lda, ldb, ldd;
};

Problem problemOf(const Shape& sh) {
  const std::string kind = sh.kind;
  Problem p;
  if (kind == "forward")
    p.ta = true, p.tb = false, p.m = sh.N, p.n = M, p.k = sh.K, p.lda = sh.K, p.ldb = sh.K, p.ldd = sh.N;
  else if (kind == "backward_data")
    p.ta = false, p.tb = false, p.m = sh.K, p.n = M, p.k = sh.N, p.lda = sh.K, p.ldb = sh.N, p.ldd = sh.K;
  else p.ta = false, p.tb = true, p.m = sh.K, p.n = sh.N, p.k = M, p.lda = sh.K, p.ldb = sh.N, p.ldd = sh.K;
  return p;
}

// A shape's cuBLASLt descriptor (with its epilogue), operand layouts and
// search preference.
struct Matmul {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulPreference_t pref;
};

Matmul createMatmul(const Shape& sh, const Problem& p, const Gpu& g) {
  Matmul mm;
  cublasLtMatmulDescCreate(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t opa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
  if (sh.bias || sh.epilogue) {
    cublasLtEpilogue_t epi = sh.epilogue == 1   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : sh.epilogue == 2 ? CUBLASLT_EPILOGUE_DGELU
                             : sh.epilogue == 3 ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                                : CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
    // DGELU_BGRAD writes the bias gradient (the row sums of its output) there.
    if (sh.epilogue != 2)
      cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias));
    if (sh.epilogue) {
      const int64_t aux_ld = p.ldd;
      cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
      cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux));
    }
  }
  cublasLtMatrixLayoutCreate(&mm.la, CUDA_R_16BF, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda);
  cublasLtMatrixLayoutCreate(&mm.lb, CUDA_R_16BF, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb);
  cublasLtMatrixLayoutCreate(&mm.ld, CUDA_R_16BF, p.m, p.n, p.ldd);
  cublasLtMatmulPreferenceCreate(&mm.pref);
  uint64_t wsb = g.ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  return mm;
}

void destroyMatmul(const Matmul& mm) {
  cublasLtMatmulPreferenceDestroy(mm.pref);
  cublasLtMatrixLayoutDestroy(mm.la);
  cublasLtMatrixLayoutDestroy(mm.lb);
  cublasLtMatrixLayoutDestroy(mm.ld);
  cublasLtMatmulDescDestroy(mm.desc);
}

// Runs `launch` `count` times between the two events; `ms` gets the time
// between them.
template <typename Launch>
void timeLaunches(const Gpu& g, int count, const Launch& launch, float& ms) {
  cudaEventRecord(g.e0, g.s);
  for (int r = 0; r < count; ++r) launch();
  cudaEventRecord(g.e1, g.s);
  cudaEventSynchronize(g.e1);
  cudaEventElapsedTime(&ms, g.e0, g.e1);
}

// The heuristic's first candidate and the fastest of them.
struct CandidateTimes {
  double first_ms = 0, best_ms = 1e30;
  int best = -1;
};

// Times each of the heuristic's `found` candidates (after three warm-up
// launches and, with --sustain-ms, a run at its own sustained clock).
CandidateTimes timeCandidates(const Shape& sh, const Gpu& g, const Matmul& mm,
                              const std::vector<cublasLtMatmulHeuristicResult_t>& res, int found, const Options& o) {
  const float alpha = 1.f, beta = 0.f;
  CandidateTimes t;
  for (int c = 0; c < found; ++c) {
    auto launch = [&] {
      return cublasLtMatmul(g.lt, mm.desc, &alpha, g.A, mm.la, g.B, mm.lb, &beta, g.D, mm.ld, g.D, mm.ld,
                            &res[size_t(c)].algo, g.ws, g.ws_bytes, g.s);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;
    for (int w = 0; w < 3; ++w) launch();
    float ms = 0;
    if (o.sustain_ms > 0) {
      // Back to back until sustain_ms have passed (in batches of 20, timed).
      double ran = 0;
      while (ran < o.sustain_ms) {
        timeLaunches(g, 20, launch, ms);
        ran += ms;
      }
    }
    timeLaunches(g, o.reps, launch, ms);
    const double per = ms / o.reps;
    if (o.each)
      fmt::print("{{\"shape\":\"{}\",\"kind\":\"{}\",\"candidate\":{},\"ms\":{:.4f}}}\n", sh.name, sh.kind, c, per);
    if (c == 0) t.first_ms = per;
    if (per < t.best_ms) t.best_ms = per, t.best = c;
  }
  return t;
}

// The fastest of every listed algorithm, tile and stage count.
struct Enumerated {
  int count = 0;
  double best_ms = 1e30;
  std::string best;
};

// Times each tile and stage count of algorithm `id` that fits the matmul,
// until `max_configs` have been timed in all.
void timeAlgoConfigs(const Gpu& g, const Matmul& mm, int id, int max_configs, Enumerated& e) {
  const float alpha = 1.f, beta = 0.f;
  cublasLtMatmulAlgo_t algo;
  if (cublasLtMatmulAlgoInit(g.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                             CUDA_R_16BF, id, &algo) != CUBLAS_STATUS_SUCCESS)
    return;
  uint32_t tiles[128] = {}, stages[128] = {};
  size_t tiles_bytes = 0, stages_bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof(tiles), &tiles_bytes);
  cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof(stages), &stages_bytes);
  const size_t n_tiles = std::max<size_t>(1, tiles_bytes / sizeof(uint32_t));
  const size_t n_stages = std::max<size_t>(1, stages_bytes / sizeof(uint32_t));
  for (size_t t = 0; t < n_tiles && e.count < max_configs; ++t)
    for (size_t s = 0; s < n_stages && e.count < max_configs; ++s) {
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof(uint32_t));
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[s], sizeof(uint32_t));
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(g.lt, mm.desc, mm.la, mm.lb, mm.ld, mm.ld, &algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > g.ws_bytes)
        continue;
      auto launch = [&] {
        return cublasLtMatmul(g.lt, mm.desc, &alpha, g.A, mm.la, g.B, mm.lb, &beta, g.D, mm.ld, g.D, mm.ld, &algo,
                              g.ws, g.ws_bytes, g.s);
      };
      if (launch() != CUBLAS_STATUS_SUCCESS) continue;
      ++e.count;
      float ms = 0;
      timeLaunches(g, 3, launch, ms);
      if (ms / 3 < e.best_ms) {
        e.best_ms = ms / 3;
        e.best = fmt::format("id {} tile {} stages {}", id, tiles[t], stages[s]);
      }
    }
}

// Every listed algorithm, tile and stage count (epilogue mode only): does
// cuBLASLt have a faster kernel for the fused epilogue than its heuristic offers?
Enumerated enumerateAlgos(const Gpu& g, const Matmul& mm, int max_configs) {
  Enumerated e;
  int ids[256], n_ids = 0;
  cublasLtMatmulAlgoGetIds(g.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                           256, ids, &n_ids);
  for (int a = 0; a < n_ids && e.count < max_configs; ++a) timeAlgoConfigs(g, mm, ids[a], max_configs, e);
  cudaGetLastError();
  return e;
}

// One shape's JSON line.
void printShape(const Shape& sh, const Problem& p, int found, const CandidateTimes& t, bool epilogues,
                const Enumerated& e) {
  const double tflops = 2.0 * p.m * p.n * p.k / (t.best_ms * 1e-3) / 1e12;
  const char* epi_name = sh.epilogue == 1   ? "gelu_aux_bias"
                         : sh.epilogue == 2 ? "dgelu"
                         : sh.epilogue == 3 ? "dgelu_bgrad"
                         : sh.bias          ? "bias"
                                            : "none";
  fmt::print("{{\"shape\":\"{}\",\"kind\":\"{}\",\"epilogue\":\"{}\",\"m\":{},\"n\":{},\"k\":{},\"candidates\":{},"
             "\"first_ms\":{:.4f},\"best_ms\":{:.4f},\"best_index\":{},\"gain\":{:.3f},\"best_tflops\":{:.0f},"
             "\"per_step\":{}",
             sh.name, sh.kind, epi_name, p.m, p.n, p.k, found, t.first_ms, t.best_ms, t.best, t.first_ms / t.best_ms,
             tflops, sh.per_step);
  if (epilogues)
    fmt::print(",\"enumerated\":{},\"enumerated_best_ms\":{:.4f},\"enumerated_best\":\"{}\"", e.count,
               e.count ? e.best_ms : 0.0, e.best);
  fmt::print("}}\n");
  std::fflush(stdout);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  if (!tandem::bench::gpusPresent("gemm_algos")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)o;
#else
  const std::vector<Shape> shapes = shapesToTime(o.epilogues);
  const Gpu g = createGpu();
  double total_first = 0, total_best = 0;
  for (const Shape& sh : shapes) {
    const Problem p = problemOf(sh);
    const Matmul mm = createMatmul(sh, p, g);
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(o.candidates));
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(g.lt, mm.desc, mm.la, mm.lb, mm.ld, mm.ld, mm.pref, o.candidates, res.data(),
                                   &found);
    const CandidateTimes t = timeCandidates(sh, g, mm, res, found, o);
    Enumerated e;
    if (o.epilogues) e = enumerateAlgos(g, mm, o.max_configs);
    printShape(sh, p, found, t, o.epilogues, e);
    total_first += t.first_ms * sh.per_step;
    total_best += t.best_ms * sh.per_step;
    destroyMatmul(mm);
  }
  fmt::print("{{\"total\":\"matmuls of one step\",\"first_heuristic_ms\":{:.3f},\"best_of_candidates_ms\":{:.3f},"
             "\"saving_ms\":{:.3f}}}\n",
             total_first, total_best, total_first - total_best);
  cublasLtDestroy(g.lt);
  return 0;
#endif
}
