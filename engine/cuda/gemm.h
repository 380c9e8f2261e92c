#pragma once
// The three matmuls of the Plan through cuBLASLt: bf16 (or fp32) operands,
// fp32 accumulation, the bias fused in the forward epilogue, one workspace.
// Row-major tensors are handed to column-major cuBLASLt as their transposes.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "engine/types.h"

namespace tandem::cuda {

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

  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

 private:
  // Column-major D[m,n] = op(A)[m,k] * op(B)[k,n] (+ beta * D) (+ bias[m]).
  void run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda,
           const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate, const void* bias,
           DType dt, cudaStream_t s);

  struct Prepared {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                         bool, int>;
  Prepared& prepare(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Prepared> cache_;
};

}  // namespace tandem::cuda
