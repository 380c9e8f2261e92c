#pragma once
// The fc layer's GEMMs with GELU epilogues of our own (gemm_gelu.cu, Hopper
// wgmma and TMA): Gemm::forwardGelu and Gemm::backwardDataGelu take this
// path instead of cuBLASLt's GELU_AUX_BIAS / DGELU epilogues when it is
// chosen, the operands are bf16 and the shape fits its tiles.
//
// Which path: TANDEM_GELU_GEMM=forward|own|cublaslt, read by
// prepareKernels(); default `forward` (our forward with cuBLASLt's backward,
// the faster pair) where the sm_90a code runs, cuBLASLt elsewhere;
// setGeluGemmPath() for tests and benchmarks.

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace tandem::cuda {

enum class GeluGemmPath {
  CublasLt,    // both through cuBLASLt's epilogues
  OwnForward,  // our forward, cuBLASLt's backward
  Own,         // both ours
};

// Sets the kernels' shared-memory limit, probes whether the device loaded
// the sm_90a code, and reads TANDEM_GELU_GEMM (an unknown value, or "own" or
// "forward" where the code is missing, throws; unset picks the default).
void prepareGeluGemm();
bool ownGeluGemmLoaded();
void setGeluGemmPath(GeluGemmPath path);

// rows x cols of output, contracted over depth: rows and cols multiples of
// 128, depth of 64.
bool ownGeluGemmFits(int64_t rows, int64_t cols, int64_t depth);
// The own path is chosen for this direction, the shape fits and every
// pointer is 16-byte aligned.
bool useOwnGeluGemm(bool forward, int64_t rows, int64_t cols, int64_t depth,
                    std::initializer_list<const void*> pointers);

// Gemm::forwardGelu's contract: pre = x W^T + bias (bias may be null), y = gelu(pre).
void geluGemmForwardOwn(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M, int64_t N,
                        int64_t K, cudaStream_t s);
// Gemm::backwardDataGelu's contract: dx[M,K] = (dy[M,N] W[N,K]) * gelu'(pre[M,K]).
void geluGemmBackwardOwn(void* dx, const void* dy, const void* W, const void* pre, int64_t M, int64_t N, int64_t K,
                         cudaStream_t s);

}  // namespace tandem::cuda
