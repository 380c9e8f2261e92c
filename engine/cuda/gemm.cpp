#include "engine/cuda/gemm.h"

#include <cstdint>
#include <string>

#include "engine/cuda/check.h"

namespace tandem::cuda {
namespace {

void checkLt(cublasStatus_t st, const char* what, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throwCudaError(what, cublasLtGetStatusString(st), "engine/cuda/gemm.cpp", line);
}
#define LT_CHECK(call) checkLt((call), #call, __LINE__)

cudaDataType_t cudaType(DType dt) {
  switch (dt) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::F32: return CUDA_R_32F;
    default: throw CudaError("matmul: operands must be f32 or bf16");
  }
}

}  // namespace

Gemm::Gemm(void* workspace, size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  LT_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : cache_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Prepared& Gemm::prepare(const Key& key) {
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  auto [trans_a, trans_b, m, n, k, lda, ldb, ldd, accumulate, epi_int, dt_int] = key;
  const Epilogue epi = Epilogue(epi_int);
  DType dt = DType(dt_int);
  cudaDataType_t type = cudaType(dt);
  Prepared p;
  LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (epi != kNone) {
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
    switch (epi) {
      case kBias: e = CUBLASLT_EPILOGUE_BIAS; break;
      case kGeluAux: e = CUBLASLT_EPILOGUE_GELU_AUX; break;
      case kGeluAuxBias: e = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
      case kDGelu: e = CUBLASLT_EPILOGUE_DGELU; break;
      case kBGradB: e = CUBLASLT_EPILOGUE_BGRADB; break;
      case kNone: break;
    }
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    if (epi == kBias || epi == kGeluAuxBias)
      LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                              sizeof(type)));
    // The heuristic reads the alignment of the bias and aux pointers (it does
    // not dereference them): present an aligned one, and only accept such
    // pointers later (kEpilogueAlignment).
    void* aligned = workspace_;
    if (epi == kBGradB || epi == kGeluAuxBias)
      LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aligned,
                                              sizeof(aligned)));
    if (epi == kGeluAux || epi == kGeluAuxBias || epi == kDGelu) {
      const int64_t aux_ld = ldd;
      LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                              sizeof(aux_ld)));
      LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &aligned, sizeof(aligned)));
    }
  }
  // Stored (pre-transpose) shapes, column-major.
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, trans_a ? k : m, trans_a ? m : k, lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, trans_b ? n : k, trans_b ? k : n, ldb));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, m, n, ldd));

  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes_;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1,
                                                     &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  // A plain GEMM (or the bias epilogue) must exist; a fused epilogue may be
  // refused and the caller falls back to separate kernels.
  if (!p.ok && (epi == kNone || epi == kBias)) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
    throw CudaError("cuBLASLt found no algorithm for a " + std::to_string(m) + "x" +
                    std::to_string(n) + "x" + std::to_string(k) + " matmul (" +
                    (st == CUBLAS_STATUS_SUCCESS ? std::string("none returned")
                                                 : std::string(cublasLtGetStatusString(st))) +
                    ")");
  }
  if (p.ok) p.algo = result.algo;
  return cache_.emplace(key, p).first->second;
}

void Gemm::run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A,
               int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate,
               const Epi& epi, DType dt, cudaStream_t s) {
  Prepared& p = prepare(Key{trans_a, trans_b, m, n, k, lda, ldb, ldd, accumulate, int(epi.kind), int(dt)});
  if (!p.ok)
    throw CudaError("cuBLASLt refuses the fused epilogue " + std::to_string(int(epi.kind)) + " for a " +
                    std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                    " matmul (ask the *Supported query first)");
  if (epi.bias)
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi.bias,
                                            sizeof(epi.bias)));
  if (epi.aux)
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &epi.aux,
                                            sizeof(epi.aux)));
  float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  LT_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algo,
                          workspace_, workspace_bytes_, s));
}

namespace {
void requireAligned(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % Gemm::kEpilogueAlignment != 0)
    throw CudaError(std::string("fused matmul epilogue: ") + what + " is not " +
                    std::to_string(Gemm::kEpilogueAlignment) + "-byte aligned");
}
}  // namespace

void Gemm::forward(void* y, const void* x, const void* W, const void* bias, int64_t M, int64_t N,
                   int64_t K, DType dt, cudaStream_t s) {
  // y^T[N,M] = W[N,K] (stored K x N, transposed) * x^T[K,M]
  run(true, false, N, M, K, W, K, x, K, y, N, false, Epi{bias ? kBias : kNone, bias, nullptr}, dt, s);
}

void Gemm::backwardData(void* dx, const void* dy, const void* W, int64_t M, int64_t N, int64_t K,
                        bool accumulate, DType dt, cudaStream_t s) {
  // dx^T[K,M] = W^T[K,N] (W stored K x N) * dy^T[N,M]
  run(false, false, K, M, N, W, K, dy, N, dx, K, accumulate, Epi{}, dt, s);
}

void Gemm::backwardWeight(void* dW, const void* dy, const void* x, int64_t M, int64_t N, int64_t K,
                          bool accumulate, DType dt, cudaStream_t s) {
  // dW^T[K,N] = x^T[K,M] * dy[M,N] (dy stored N x M, transposed)
  run(false, true, K, N, M, x, K, dy, N, dW, K, accumulate, Epi{}, dt, s);
}

bool Gemm::forwardGeluSupported(int64_t M, int64_t N, int64_t K, bool has_bias, DType dt) {
  if (N % 8 != 0) return false;
  return supported(Key{true, false, N, M, K, K, K, N, false, int(has_bias ? kGeluAuxBias : kGeluAux), int(dt)});
}

void Gemm::forwardGelu(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M,
                       int64_t N, int64_t K, DType dt, cudaStream_t s) {
  // As forward; aux (the GELU input) has D's layout: pre^T[N,M], leading dimension N.
  requireAligned(pre, "the GELU input");
  if (bias) requireAligned(bias, "the bias");
  run(true, false, N, M, K, W, K, x, K, y, N, false, Epi{bias ? kGeluAuxBias : kGeluAux, bias, pre}, dt, s);
}

bool Gemm::backwardDataGeluSupported(int64_t M, int64_t N, int64_t K, DType dt) {
  if (K % 8 != 0) return false;
  return supported(Key{false, false, K, M, N, K, N, K, false, int(kDGelu), int(dt)});
}

void Gemm::backwardDataGelu(void* dx, const void* dy, const void* W, const void* pre, int64_t M,
                            int64_t N, int64_t K, DType dt, cudaStream_t s) {
  requireAligned(pre, "the GELU input");
  run(false, false, K, M, N, W, K, dy, N, dx, K, false, Epi{kDGelu, nullptr, pre}, dt, s);
}

bool Gemm::backwardWeightBiasSupported(int64_t M, int64_t N, int64_t K, DType dt) {
  return supported(Key{false, true, K, N, M, K, N, K, false, int(kBGradB), int(dt)});
}

void Gemm::backwardWeightBias(void* dW, void* db, const void* dy, const void* x, int64_t M, int64_t N,
                              int64_t K, DType dt, cudaStream_t s) {
  // op(B) = dy[M,N] (k x n): its column sums over k are db[N].
  requireAligned(db, "the bias gradient");
  run(false, true, K, N, M, x, K, dy, N, dW, K, false, Epi{kBGradB, db, nullptr}, dt, s);
}

}  // namespace tandem::cuda
