#pragma once
// The three matmuls of the Plan through cuBLASLt: bf16 (or fp32) operands,
// fp32 accumulation, the bias fused in the forward epilogue, one workspace.
// Row-major tensors are handed to column-major cuBLASLt as their transposes.
//
// Epilogue fusions (engine/cuda/fusion.h decides when the executor uses them):
// the forward can also apply GELU (tanh form, the same function as
// geluForward) and keep its input, the data gradient can be multiplied by
// GELU's derivative, and the weight gradient can produce the bias gradient
// in the same GEMM. Each fused variant has a *Supported query: cuBLASLt may
// refuse a combination (dtype, shape), and the caller then falls back to the
// separate kernels.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/ir/types.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/numerics/fp8.h"

namespace tandem::cuda {

// One GEMM shape whose algorithm was chosen by timing (Gemm::setTuning).
struct GemmTuning {
  int64_t m = 0, n = 0, k = 0;  // cuBLASLt's column-major problem
  int candidates = 0;           // algorithms cuBLASLt offered
  int chosen = 0;               // index among them (0: its first choice)
  double first_ms = 0;          // its first choice, measured
  double chosen_ms = 0;         // the kept one, measured
  int first_extra_nodes = 0;    // graph nodes its launch adds besides the kernel (a memset)
  int chosen_extra_nodes = 0;
};

// The timed shapes added up: one call of each, first choice vs kept.
struct GemmTuningTotals {
  int shapes = 0, changed = 0;
  double first_ms = 0, chosen_ms = 0;
  int first_extra_nodes = 0, chosen_extra_nodes = 0;
};
inline GemmTuningTotals totalsOf(const std::vector<GemmTuning>& tuned) {
  GemmTuningTotals t;
  for (const GemmTuning& g : tuned) {
    ++t.shapes;
    t.changed += g.chosen != 0;
    t.first_ms += g.first_ms;
    t.chosen_ms += g.chosen_ms;
    t.first_extra_nodes += g.first_extra_nodes;
    t.chosen_extra_nodes += g.chosen_extra_nodes;
  }
  return t;
}

class Gemm {
 public:
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[M,N] = x[M,K] * W[N,K]^T + bias[N] (bias may be null)
  void forward(void* y, const void* x, const void* W, const void* bias, int64_t M, int64_t N,
               int64_t K, DType dt, cudaStream_t s);
  // dx[M,K] (+)= dy[M,N] * W[N,K]
  void backwardData(void* dx, const void* dy, const void* W, int64_t M, int64_t N, int64_t K,
                    bool accumulate, DType dt, cudaStream_t s);
  // dW[N,K] (+)= dy[M,N]^T * x[M,K]
  void backwardWeight(void* dW, const void* dy, const void* x, int64_t M, int64_t N, int64_t K,
                      bool accumulate, DType dt, cudaStream_t s);

  // y[M,N] = x[M,K] * W[N,K]^T + bias[N] + r[M,N] (bias may be null): the
  // residual add as cuBLASLt's C operand (beta = 1), summed in fp32 and
  // rounded once. y and r may be the same memory (in place), or disjoint.
  bool forwardResidualSupported(int64_t M, int64_t N, int64_t K, bool has_bias, DType dt);
  void forwardResidual(void* y, const void* x, const void* W, const void* bias, const void* r, int64_t M,
                       int64_t N, int64_t K, DType dt, cudaStream_t s);

  // pre[M,N] = x[M,K] * W[N,K]^T + bias[N] (bias may be null) and
  // y[M,N] = gelu(pre), GELU computed from the fp32 accumulator
  // (CUBLASLT_EPILOGUE_GELU_AUX[_BIAS]). y and pre must not overlap; N % 8 == 0.
  bool forwardGeluSupported(int64_t M, int64_t N, int64_t K, bool has_bias, DType dt);
  void forwardGelu(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M,
                   int64_t N, int64_t K, DType dt, cudaStream_t s);
  // dx[M,K] = (dy[M,N] * W[N,K]) * gelu'(pre[M,K]) (CUBLASLT_EPILOGUE_DGELU,
  // never accumulating). K % 8 == 0.
  bool backwardDataGeluSupported(int64_t M, int64_t N, int64_t K, DType dt);
  void backwardDataGelu(void* dx, const void* dy, const void* W, const void* pre, int64_t M,
                        int64_t N, int64_t K, DType dt, cudaStream_t s);
  // dW[N,K] = dy[M,N]^T * x[M,K] and db[N] = sum_m dy[m,:] in one GEMM
  // (CUBLASLT_EPILOGUE_BGRADB); db has the dtype of dW; never accumulating.
  bool backwardWeightBiasSupported(int64_t M, int64_t N, int64_t K, DType dt);
  void backwardWeightBias(void* dW, void* db, const void* dy, const void* x, int64_t M, int64_t N,
                          int64_t K, DType dt, cudaStream_t s);

  // FP8 GEMMs (training.precision fp8): operands of one byte per element in
  // E4M3 or E5M2, each with the device float that undoes its cast's scale
  // (1 / scale: cuBLASLt's A/B scale), fp32 accumulation, output and C in
  // `dt`. Hopper's FP8 GEMMs read both operands K-major (cuBLASLt's "TN"
  // only), so the backward takes transposed copies (transposeBytes in
  // kernels.h). As Transformer Engine runs them, the forward accumulates
  // fast (the tensor cores' own accumulator) and the backward promotes to
  // fp32 along K (CUBLASLT_MATMUL_DESC_FAST_ACCUM off).
  struct Fp8Operand {
    const void* codes = nullptr;
    Fp8Format format = Fp8Format::E4M3;
    const float* scale_inv = nullptr;
  };
  // y[M,N] = x[M,K] * W[N,K]^T (+ bias[N]) (+ r[M,N] when r is given: the
  // residual as C, beta = 1).
  bool forwardFp8Supported(int64_t M, int64_t N, int64_t K, Fp8Format x, Fp8Format w, bool has_bias, bool residual,
                           DType dt);
  void forwardFp8(void* y, const Fp8Operand& x, const Fp8Operand& W, const void* bias, const void* r, int64_t M,
                  int64_t N, int64_t K, DType dt, cudaStream_t s);
  // dx[M,K] (+)= dy[M,N] * W[N,K], from Wt = W^T stored [K,N].
  void backwardDataFp8(void* dx, const Fp8Operand& dy, const Fp8Operand& Wt, int64_t M, int64_t N, int64_t K,
                       bool accumulate, DType dt, cudaStream_t s);
  // dW[N,K] (+)= dy[M,N]^T * x[M,K], from dyT = dy^T stored [N,M] and xT =
  // x^T stored [K,M].
  void backwardWeightFp8(void* dW, const Fp8Operand& dyT, const Fp8Operand& xT, int64_t M, int64_t N, int64_t K,
                         bool accumulate, DType dt, cudaStream_t s);

  // Algorithm tuning. cuBLASLt's first heuristic choice is not always its
  // fastest algorithm for a shape (up to 15% slower on GPT-2's on H200:
  // bench_gemm_algos). While tuning is on, the first call of each shape
  // times the top kTuneCandidates algorithms on the call's stream, waits for
  // them (never call it inside a graph capture), and keeps the fastest when
  // it beats the first choice by kTuneMargin; that call computes nothing
  // useful. Each candidate is also captured once into a throwaway graph to
  // count the nodes its launch adds besides the kernel, and charged
  // kGraphNodeCostUs for each (algorithm_choice.h; TANDEM_GEMM_NODE_COST_US
  // sets another charge, 0 turns it off). Choices are shared by every Gemm of the process on the same
  // device model, so that executors of one process run the same algorithms
  // and give bit-identical results.
  static constexpr int kTuneCandidates = 8;
  static constexpr double kTuneMargin = 0.03;
  static constexpr double kGraphNodeCostUs = 2.5;
  void setTuning(bool on) { tuning_ = on; }
  const std::vector<GemmTuning>& tuning() const { return tuned_; }

  // Workspace slices for the step's graph (graph_memsets.h). Between
  // beginGraphCapture(true) and endGraphCapture, each launch of an algorithm
  // whose launch adds a memset (known from tuning) gets a slice of the
  // workspace's last kSliceRegionBytes to itself, while room lasts; the
  // memsets in capturedSlices() can then move to the start of the graph.
  // The other launches share the rest of the workspace.
  static constexpr size_t kSliceRegionBytes = size_t(1) << 20;
  void beginGraphCapture(bool slices);
  void endGraphCapture() { slicing_ = false; }
  std::pair<const void*, const void*> capturedSlices() const {
    return {slice_base_, slice_base_ ? slice_base_ + slice_used_ : nullptr};
  }

  // Pointers the fused epilogues accept (bias, aux): the algorithms are
  // chosen for this alignment.
  static constexpr uintptr_t kEpilogueAlignment = 256;
  static constexpr size_t kWorkspaceBytes = size_t(gpu_footprint::kGemmWorkspaceBytes);

 private:
  enum Epilogue : int { kNone, kBias, kGeluAux, kGeluAuxBias, kDGelu, kBGradB };
  // Column-major D[m,n] = op(A)[m,k] * op(B)[k,n] (+ C, C = D unless `c`
  // names another matrix of D's layout, when accumulating) with the
  // epilogue: bias[m] added (kBias, kGeluAuxBias), GELU with its input to
  // aux[m,n] (kGeluAux*), times gelu'(aux[m,n]) (kDGelu), or the column sums
  // of op(B) to bias[n] (kBGradB).
  struct Epi {
    Epilogue kind = kNone;
    const void* bias = nullptr;
    const void* aux = nullptr;
    const void* c = nullptr;
    const float* a_scale = nullptr;  // FP8 operands' 1 / scale
    const float* b_scale = nullptr;
  };
  // The FP8 part of a GEMM's key: 0 for bf16/fp32 operands, else
  // 1 + A's format + 2 * B's format + 4 * fast accumulation.
  static int fp8Code(Fp8Format a, Fp8Format b, bool fast_accum) {
    return 1 + int(a == Fp8Format::E5M2) + 2 * int(b == Fp8Format::E5M2) + 4 * int(fast_accum);
  }
  void run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda,
           const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate, const Epi& epi,
           DType dt, cudaStream_t s, int fp8 = 0);
  // FP8, the only layout Hopper has ("TN"): column-major D[m,n] (+)= op(A)
  // op(B) with A stored k x m and B k x n, both K-major (ld = k).
  void runFp8(int64_t m, int64_t n, int64_t k, const Fp8Operand& A, const Fp8Operand& B, void* D, bool accumulate,
              Epi epi, DType dt, cudaStream_t s, bool fast_accum);

  struct Prepared {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;  // cuBLASLt offered an algorithm
    std::vector<cublasLtMatmulAlgo_t> candidates;  // cuBLASLt's order, [0] == its first choice
    std::vector<size_t> candidate_ws;              // the workspace each needs
    bool tuned = false;
    size_t ws_need = 0;   // of algo
    int extra_nodes = 0;  // graph nodes algo's launch adds besides its kernel (known once tuned)
  };
  // trans_a, trans_b, m, n, k, lda, ldb, ldd, accumulate, epilogue, dtype, fp8Code (0: not FP8)
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                         int, int, int>;
  Prepared& prepare(const Key& key);
  bool supported(const Key& key) { return prepare(key).ok; }
  // Times p's candidates for one call and sets p.algo (see setTuning).
  void tune(const Key& key, Prepared& p, const void* A, const void* B, void* D, float beta, cudaStream_t s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t shared_bytes_;  // the part of the workspace every unsliced launch uses
  char* slice_base_ = nullptr;
  size_t slice_used_ = 0;
  bool slicing_ = false;
  std::map<Key, Prepared> cache_;
  bool tuning_ = false;
  std::vector<GemmTuning> tuned_;
  std::string device_name_;  // the process-wide choices are per device model
};

}  // namespace tandem::cuda
