#include "engine/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "engine/cuda/algorithm_choice.h"
#include "engine/cuda/check.h"
#include "engine/cuda/gemm_choice_cache.h"
#include "engine/cuda/gemm_gelu.h"
#include "engine/spec/parse_number.h"

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
    : workspace_(workspace), shared_bytes_(workspace_bytes) {
  LT_CHECK(cublasLtCreate(&handle_));
  // Room for the slices only where it leaves most of the workspace shared.
  if (workspace && workspace_bytes >= 8 * kSliceRegionBytes) {
    shared_bytes_ = workspace_bytes - kSliceRegionBytes;
    slice_base_ = static_cast<char*>(workspace) + shared_bytes_;
  }
}

void Gemm::beginGraphCapture(bool slices) {
  slicing_ = slices && slice_base_;
  slice_used_ = 0;
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
  auto [trans_a, trans_b, m, n, k, lda, ldb, ldd, accumulate, epi_int, dt_int, fp8] = key;
  const Epilogue epi = Epilogue(epi_int);
  DType dt = DType(dt_int);
  cudaDataType_t type = cudaType(dt);
  // FP8 operands (fp8Code): A's and B's formats; C and D stay in `type`.
  cudaDataType_t a_type = type, b_type = type;
  if (fp8 > 0) {
    a_type = (fp8 - 1) & 1 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    b_type = (fp8 - 1) & 2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
  }
  Prepared p;
  LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (fp8 > 0) {
    const int8_t fast = (fp8 - 1) & 4 ? 1 : 0;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    // The heuristic may read the scale pointers' presence: present the
    // workspace (it does not dereference them); each call sets its own.
    const void* any = workspace_;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof(any)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof(any)));
  }
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
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.a, a_type, trans_a ? k : m, trans_a ? m : k, lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.b, b_type, trans_b ? n : k, trans_b ? k : n, ldb));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, m, n, ldd));

  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = shared_bytes_;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof(ws)));
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, kTuneCandidates,
                                                     results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  // A plain GEMM (or the bias epilogue) must exist; a fused epilogue may be
  // refused and the caller falls back to separate kernels.
  // (An FP8 GEMM may be refused too: the executor asks forwardFp8Supported
  // and the plan check refuses shapes it cannot run.)
  if (!p.ok && fp8 == 0 && (epi == kNone || epi == kBias)) {
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
  if (p.ok) {
    p.algo = results[0].algo;
    p.ws_need = results[0].workspaceSize;
    for (int i = 0; i < found; ++i) {
      p.candidates.push_back(results[i].algo);
      p.candidate_ws.push_back(results[i].workspaceSize);
    }
  }
  return cache_.emplace(key, p).first->second;
}

void Gemm::run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A,
               int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate,
               const Epi& epi, DType dt, cudaStream_t s, int fp8) {
  const Key key{trans_a, trans_b, m, n, k, lda, ldb, ldd, accumulate, int(epi.kind), int(dt), fp8};
  Prepared& p = prepare(key);
  if (!p.ok && fp8 > 0)
    throw CudaError("cuBLASLt found no FP8 algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                    std::to_string(k) + " matmul (FP8 GEMMs need every dimension a multiple of 16)");
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
  if (fp8 > 0) {
    if (!epi.a_scale || !epi.b_scale) throw CudaError("FP8 matmul without its operands' scales");
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &epi.a_scale,
                                            sizeof(epi.a_scale)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &epi.b_scale,
                                            sizeof(epi.b_scale)));
  }
  float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (tuning_) {
    if (!p.tuned) tune(key, p, A, B, D, beta, s);
    return;
  }
  void* ws = workspace_;
  size_t ws_bytes = shared_bytes_;
  if (slicing_ && p.extra_nodes > 0) {
    const size_t need = (std::max<size_t>(p.ws_need, 1) + 255) / 256 * 256;
    if (slice_used_ + need <= kSliceRegionBytes) {
      ws = slice_base_ + slice_used_;
      ws_bytes = need;
      slice_used_ += need;
    }
  }
  const void* C = epi.c ? epi.c : D;
  LT_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.d, D, p.d, &p.algo, ws, ws_bytes,
                          s));
}

namespace {

// Tuned choices of the process: (device model, shape key) -> candidate index.
// The index into cuBLASLt's deterministic candidate list identifies the
// algorithm for every Gemm of the process.
std::mutex g_tuned_mu;
std::map<std::pair<std::string, std::string>, int> g_tuned;
// The devices whose choices of earlier runs were read into g_tuned
// (gemm_choice_cache.h), under g_tuned_mu.
std::set<std::string> g_loaded_devices;

// The charge per extra graph node (Gemm::kGraphNodeCostUs unless
// TANDEM_GEMM_NODE_COST_US says otherwise), in ms.
double graphNodeCostMs() {
  const char* env = std::getenv("TANDEM_GEMM_NODE_COST_US");
  double us = Gemm::kGraphNodeCostUs;
  if (env && *env) {
    const auto v = parseFiniteNumber(env);
    if (!v || !(*v >= 0))
      throw CudaError(std::string("TANDEM_GEMM_NODE_COST_US: expected microseconds >= 0, got '") + env + "'");
    us = *v;
  }
  return us / 1000.0;
}

// How many graph nodes one launch adds besides its kernel: the launch is
// captured (not run) on a private stream into a graph that is thrown away.
// -1 when it cannot be captured.
int extraGraphNodes(const std::function<cublasStatus_t(cudaStream_t)>& launch) {
  cudaStream_t cs = nullptr;
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess) return -1;
  int extra = -1;
  if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    const cublasStatus_t st = launch(cs);
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(cs, &g) == cudaSuccess && g) {
      size_t nodes = 0;
      if (st == CUBLAS_STATUS_SUCCESS && cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess && nodes > 0)
        extra = int(nodes) - 1;
      cudaGraphDestroy(g);
    }
  }
  cudaStreamDestroy(cs);
  cudaGetLastError();  // a refused capture leaves no sticky error behind
  return extra;
}

template <class T>
std::string keyText(const T& key) {
  return std::apply([](auto... v) { return ((std::to_string(v) + ",") + ...); }, key);
}

}  // namespace

void Gemm::tune(const Key& key, Prepared& p, const void* A, const void* B, void* D, float beta, cudaStream_t s) {
  p.tuned = true;
  if (device_name_.empty()) {
    int dev = 0;
    cudaDeviceProp prop{};
    TANDEM_CUDA_CHECK(cudaGetDevice(&dev));
    TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    device_name_ = prop.name;
  }
  const auto shared_key = std::make_pair(device_name_, keyText(key));
  const GemmChoiceCache disk(device_name_, shared_bytes_);
  const float alpha = 1.f;
  int chosen_before = -1;
  {
    std::lock_guard<std::mutex> lock(g_tuned_mu);
    if (g_loaded_devices.insert(device_name_).second)
      for (const auto& [shape, choice] : disk.load()) g_tuned.emplace(std::make_pair(device_name_, shape), choice);
    if (auto it = g_tuned.find(shared_key); it != g_tuned.end()) chosen_before = it->second;
  }
  if (chosen_before >= 0) {
    if (chosen_before < int(p.candidates.size())) {
      const size_t c = size_t(chosen_before);
      p.algo = p.candidates[c];
      p.ws_need = p.candidate_ws[c];
      p.extra_nodes = std::max(0, extraGraphNodes([&](cudaStream_t on) {
        return cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.candidates[c],
                              workspace_, shared_bytes_, on);
      }));
    }
    return;
  }
  GemmTuning report;
  report.m = std::get<2>(key), report.n = std::get<3>(key), report.k = std::get<4>(key);
  report.candidates = int(p.candidates.size());
  cudaEvent_t e0, e1;
  TANDEM_CUDA_CHECK(cudaEventCreate(&e0));
  TANDEM_CUDA_CHECK(cudaEventCreate(&e1));
  constexpr int kWarm = 2, kTimed = 5;
  std::vector<double> ms(p.candidates.size(), -1.0);
  std::vector<int> extra(p.candidates.size(), 0);
  for (size_t c = 0; c < p.candidates.size(); ++c) {
    auto launchOn = [&](cudaStream_t on) {
      return cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.candidates[c],
                            workspace_, shared_bytes_, on);
    };
    auto launch = [&] { return launchOn(s); };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // an algorithm may refuse these pointers
    extra[c] = std::max(0, extraGraphNodes(launchOn));
    for (int w = 1; w < kWarm; ++w) launch();
    TANDEM_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < kTimed; ++r) launch();
    TANDEM_CUDA_CHECK(cudaEventRecord(e1, s));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms[c] = t / kTimed;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  int chosen = chooseAlgorithm(withGraphNodeCost(ms, extra, graphNodeCostMs()), kTuneMargin);
  {
    std::lock_guard<std::mutex> lock(g_tuned_mu);
    // Another Gemm of the process may have tuned the same shape meanwhile: its choice stands.
    const auto [it, fresh] = g_tuned.emplace(shared_key, chosen);
    chosen = it->second;
    if (fresh) disk.record(shared_key.second, chosen);
  }
  if (chosen < int(p.candidates.size())) {
    p.algo = p.candidates[size_t(chosen)];
    p.ws_need = p.candidate_ws[size_t(chosen)];
    p.extra_nodes = extra[size_t(chosen)];
  }
  report.chosen = chosen;
  report.first_ms = std::max(0.0, ms.empty() ? 0.0 : ms[0]);
  report.chosen_ms = chosen < int(ms.size()) ? std::max(0.0, ms[size_t(chosen)]) : 0.0;
  report.first_extra_nodes = extra.empty() ? 0 : extra[0];
  report.chosen_extra_nodes = chosen < int(extra.size()) ? extra[size_t(chosen)] : 0;
  tuned_.push_back(report);
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

bool Gemm::forwardResidualSupported(int64_t M, int64_t N, int64_t K, bool has_bias, DType dt) {
  // As forward, accumulating: the same key forwardResidual runs.
  return supported(Key{true, false, N, M, K, K, K, N, true, int(has_bias ? kBias : kNone), int(dt), 0});
}

void Gemm::forwardResidual(void* y, const void* x, const void* W, const void* bias, const void* r, int64_t M,
                           int64_t N, int64_t K, DType dt, cudaStream_t s) {
  // As forward, with C = r^T[N,M] in y's layout.
  run(true, false, N, M, K, W, K, x, K, y, N, true, Epi{bias ? kBias : kNone, bias, nullptr, r}, dt, s);
}

bool Gemm::forwardGeluSupported(int64_t M, int64_t N, int64_t K, bool has_bias, DType dt) {
  if (N % 8 != 0) return false;
  if (dt == DType::BF16 && useOwnGeluGemm(true, M, N, K, {})) return true;
  return supported(Key{true, false, N, M, K, K, K, N, false, int(has_bias ? kGeluAuxBias : kGeluAux), int(dt), 0});
}

void Gemm::forwardGelu(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M,
                       int64_t N, int64_t K, DType dt, cudaStream_t s) {
  // As forward; aux (the GELU input) has D's layout: pre^T[N,M], leading dimension N.
  if (dt == DType::BF16 && useOwnGeluGemm(true, M, N, K, {y, pre, x, W, bias}))
    return geluGemmForwardOwn(y, pre, x, W, bias, M, N, K, s);
  requireAligned(pre, "the GELU input");
  if (bias) requireAligned(bias, "the bias");
  run(true, false, N, M, K, W, K, x, K, y, N, false, Epi{bias ? kGeluAuxBias : kGeluAux, bias, pre}, dt, s);
}

bool Gemm::backwardDataGeluSupported(int64_t M, int64_t N, int64_t K, DType dt) {
  if (K % 8 != 0) return false;
  if (dt == DType::BF16 && useOwnGeluGemm(false, M, K, N, {})) return true;
  return supported(Key{false, false, K, M, N, K, N, K, false, int(kDGelu), int(dt), 0});
}

void Gemm::backwardDataGelu(void* dx, const void* dy, const void* W, const void* pre, int64_t M,
                            int64_t N, int64_t K, DType dt, cudaStream_t s) {
  if (dt == DType::BF16 && useOwnGeluGemm(false, M, K, N, {dx, dy, W, pre}))
    return geluGemmBackwardOwn(dx, dy, W, pre, M, N, K, s);
  requireAligned(pre, "the GELU input");
  run(false, false, K, M, N, W, K, dy, N, dx, K, false, Epi{kDGelu, nullptr, pre}, dt, s);
}

bool Gemm::backwardWeightBiasSupported(int64_t M, int64_t N, int64_t K, DType dt) {
  return supported(Key{false, true, K, N, M, K, N, K, false, int(kBGradB), int(dt), 0});
}

void Gemm::backwardWeightBias(void* dW, void* db, const void* dy, const void* x, int64_t M, int64_t N,
                              int64_t K, DType dt, cudaStream_t s) {
  // op(B) = dy[M,N] (k x n): its column sums over k are db[N].
  requireAligned(db, "the bias gradient");
  run(false, true, K, N, M, x, K, dy, N, dW, K, false, Epi{kBGradB, db, nullptr}, dt, s);
}

bool Gemm::forwardFp8Supported(int64_t M, int64_t N, int64_t K, Fp8Format x, Fp8Format w, bool has_bias,
                               bool residual, DType dt) {
  if (M % 16 != 0 || N % 16 != 0 || K % 16 != 0) return false;
  return supported(Key{true, false, N, M, K, K, K, N, residual, int(has_bias ? kBias : kNone), int(dt),
                       fp8Code(w, x, true)});
}

void Gemm::forwardFp8(void* y, const Fp8Operand& x, const Fp8Operand& W, const void* bias, const void* r,
                      int64_t M, int64_t N, int64_t K, DType dt, cudaStream_t s) {
  // As forward: y^T[N,M] = W[N,K] (stored K x N, transposed) * x^T[K,M]; A = W, B = x.
  runFp8(N, M, K, W, x, y, r != nullptr, Epi{bias ? kBias : kNone, bias, nullptr, r}, dt, s, /*fast_accum=*/true);
}

void Gemm::backwardDataFp8(void* dx, const Fp8Operand& dy, const Fp8Operand& Wt, int64_t M, int64_t N, int64_t K,
                           bool accumulate, DType dt, cudaStream_t s) {
  // dx^T[K,M] = (Wt stored N x K, transposed) * dy^T[N,M] (dy stored N x M).
  runFp8(K, M, N, Wt, dy, dx, accumulate, Epi{}, dt, s, /*fast_accum=*/false);
}

void Gemm::backwardWeightFp8(void* dW, const Fp8Operand& dyT, const Fp8Operand& xT, int64_t M, int64_t N, int64_t K,
                             bool accumulate, DType dt, cudaStream_t s) {
  // dW^T[K,N] = (xT stored M x K, transposed) * (dyT stored M x N).
  runFp8(K, N, M, xT, dyT, dW, accumulate, Epi{}, dt, s, /*fast_accum=*/false);
}

void Gemm::runFp8(int64_t m, int64_t n, int64_t k, const Fp8Operand& A, const Fp8Operand& B, void* D,
                  bool accumulate, Epi epi, DType dt, cudaStream_t s, bool fast_accum) {
  epi.a_scale = A.scale_inv;
  epi.b_scale = B.scale_inv;
  run(true, false, m, n, k, A.codes, k, B.codes, k, D, m, accumulate, epi, dt, s,
      fp8Code(A.format, B.format, fast_accum));
}

}  // namespace tandem::cuda
