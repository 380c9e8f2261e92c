// bench_kernel_pairs: how two of the executor's kernels share the GPU when
// they run on two streams at once, as a training step's weight-gradient
// stream runs them beside stream 0. For each pair (X, Y) at each width:
// X alone, Y alone, then X launched first with Y on the other stream, and Y
// first with X on the other stream; each time from a common start event to
// each kernel's end (median over --reps rounds, the four measurements in
// turn inside each round, after --warm-seconds of the pair back to back at
// the GPU's power limit). The figures the simulator's kernel sharing
// (docs/simulator.md, "first_holds") is checked against: whether the kernel
// launched first keeps its speed, how fast the other runs beside it, and
// what both take together against one after the other.
//
// Pairs of GPT-2's backward (--family gpt2, the default) at `--rows` tokens,
// bf16, width C, heads of 64:
//   fc_wgrad+ln_bwd      the MLP's fc weight gradient (dW[4C, C] = dy^T x)
//                        beside a layernorm backward of rows x C
//   qkv_wgrad+ln_bwd     the QKV weight gradient (dW[3C, C]) beside it
//   proj_wgrad+fc_dgrad  the MLP projection's weight gradient (dW[C, 4C])
//                        beside the fc data gradient (dx[rows, C])
//   attn_bwd+proj_wgrad  the attention backward (sequence --seq) beside the
//                        attention projection's weight gradient (dW[C, C])
// and of a Llama's (--family llama, SwiGLU width F = --mlp-ratio x C
// rounded up to 256, as the job specs round it):
//   gateup_wgrad+rms_bwd     the gate and up projections' weight gradient
//                            (dW[2F, C]) beside an RMSNorm backward
//   down_wgrad+swiglu_bwd    the down projection's weight gradient
//                            (dW[C, F]) beside the SwiGLU backward
//   down_wgrad+gateup_dgrad  the same beside the gate and up projections'
//                            data gradient (dx[rows, C] from dy[rows, 2F])
//
//   bench_kernel_pairs [--family gpt2|llama] [--widths C,C,...] [--rows M] [--seq T] [--mlp-ratio R]
//                      [--reps N] [--warm-seconds S] [--only PAIR]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#endif

namespace {

struct Options {
  bool llama = false;
  std::vector<int64_t> widths;  // default by family
  int64_t rows = 16384, seq = 1024;
  double mlp_ratio = 2.75;
  int reps = 50;
  double warm_seconds = 1.0;
  std::string only;
};

Options parseOptions(int argc, char** argv) {
  Options o;
  tandem::bench::ArgReader args("bench_kernel_pairs",
                                "[--family gpt2|llama] [--widths C,C,...] [--rows M] [--seq T] [--mlp-ratio R] "
                                "[--reps N] [--warm-seconds S] [--only PAIR]",
                                argc, argv);
  while (args.next()) {
    if (args.is("--family")) {
      const std::string f = args.text();
      if (f != "gpt2" && f != "llama") args.fail("--family takes gpt2 or llama, not '" + f + "'");
      o.llama = f == "llama";
    } else if (args.is("--mlp-ratio")) o.mlp_ratio = args.number(1, 16);
    else if (args.is("--widths")) {
      o.widths.clear();
      std::stringstream list(args.text());
      for (std::string item; std::getline(list, item, ',');) {
        char* end = nullptr;
        const long long c = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || c < 64 || c > 8192 || c % 64 != 0)
          args.fail("--widths: '" + item + "' is not a width of 64-8192 in steps of 64 (heads of 64)");
        o.widths.push_back(c);
      }
    } else if (args.is("--rows")) o.rows = args.integer(64, 1 << 20);
    else if (args.is("--seq")) o.seq = args.integer(64, 65536);
    else if (args.is("--reps")) o.reps = int(args.integer(1, 100000));
    else if (args.is("--warm-seconds")) o.warm_seconds = args.number(0, 60);
    else if (args.is("--only")) o.only = args.text();
    else args.unknown();
  }
  if (o.widths.empty())
    o.widths = o.llama ? std::vector<int64_t>{2048, 3072, 4096} : std::vector<int64_t>{768, 1024, 1280, 1600, 2048};
  if (o.rows % o.seq != 0) args.fail(fmt::format("--rows {} is not a whole number of sequences of {}", o.rows, o.seq));
  return o;
}

#ifdef TANDEM_HAVE_CUDA
using tandem::DType;
namespace cuda = tandem::cuda;

// Device buffers, filled on the device (normal values of a given spread,
// or a constant: a GEMM's power draw, and so its clock at the power limit,
// depends on its operands' bits), freed at the end.
class Buffers {
 public:
  ~Buffers() {
    for (void* p : owned_) cudaFree(p);
  }
  void* bf16(int64_t n, float spread = 1.f) { return fill(n, DType::BF16, true, 0.f, spread); }
  void* bf16Constant(int64_t n, float value) { return fill(n, DType::BF16, false, value, 0.f); }
  void* f32(int64_t n, float spread = 0.1f) { return fill(n, DType::F32, true, 0.f, spread); }
  void* f32Constant(int64_t n, float value) { return fill(n, DType::F32, false, value, 0.f); }
  void* zeros(int64_t bytes) {
    void* p = allocate(bytes);
    TANDEM_CUDA_CHECK(cudaMemset(p, 0, size_t(bytes)));
    return p;
  }

 private:
  void* allocate(int64_t bytes) {
    void* p = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&p, size_t(bytes)));
    owned_.push_back(p);
    return p;
  }
  void* fill(int64_t n, DType dt, bool normal, float constant, float spread) {
    void* p = allocate(n * (dt == DType::BF16 ? 2 : 4));
    cuda::fillInitialValues(p, dt, 0, n, normal, constant, ++seed_, spread, nullptr);
    return p;
  }
  uint64_t seed_ = 11;
  std::vector<void*> owned_;
};

using Launch = std::function<void(cudaStream_t)>;

struct Pair {
  std::string name, first, second;  // x's and y's names
  Launch x, y;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The four measurements of one pair, in turn, reps times.
void measure(const Pair& p, int64_t width, const Options& o, cudaStream_t a, cudaStream_t b) {
  cudaEvent_t start, end_a, end_b;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&end_a));
  TANDEM_CUDA_CHECK(cudaEventCreate(&end_b));
  // Times (us) from the start to the end on stream a and on stream b; the
  // first launch goes to a.
  auto run = [&](const Launch* on_a, const Launch* on_b, double* t_a, double* t_b) {
    TANDEM_CUDA_CHECK(cudaEventRecord(start, a));
    if (on_b) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(b, start, 0));
    (*on_a)(a);
    if (on_b) (*on_b)(b);
    TANDEM_CUDA_CHECK(cudaEventRecord(end_a, a));
    if (on_b) TANDEM_CUDA_CHECK(cudaEventRecord(end_b, b));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(end_a));
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end_a));
    *t_a = 1e3 * ms;
    if (on_b) {
      TANDEM_CUDA_CHECK(cudaEventSynchronize(end_b));
      TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end_b));
      *t_b = 1e3 * ms;
    }
  };
  double ta = 0, tb = 0;
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.warm_seconds);
  do run(&p.x, &p.y, &ta, &tb);
  while (std::chrono::steady_clock::now() < warm_until);
  std::vector<double> x_alone, y_alone, xy_x, xy_y, yx_y, yx_x;
  for (int r = 0; r < o.reps; ++r) {
    run(&p.x, nullptr, &ta, &tb);
    x_alone.push_back(ta);
    run(&p.y, nullptr, &ta, &tb);
    y_alone.push_back(ta);
    run(&p.x, &p.y, &ta, &tb);
    xy_x.push_back(ta);
    xy_y.push_back(tb);
    run(&p.y, &p.x, &ta, &tb);
    yx_y.push_back(ta);
    yx_x.push_back(tb);
  }
  const double xa = median(x_alone), ya = median(y_alone);
  const double xy_first = median(xy_x), xy_second = median(xy_y), yx_first = median(yx_y), yx_second = median(yx_x);
  // "both": until the later of the two ends; against xa + ya, the serial time.
  fmt::print(
      "{{\"bench\":\"kernel_pairs\",\"family\":\"{}\",\"pair\":\"{}\",\"width\":{},\"rows\":{},"
      "\"first\":\"{}\",\"second\":\"{}\","
      "\"first_alone_us\":{:.2f},\"second_alone_us\":{:.2f},"
      "\"first_launched_first\":{{\"first_us\":{:.2f},\"second_us\":{:.2f},\"both_over_serial\":{:.3f}}},"
      "\"second_launched_first\":{{\"second_us\":{:.2f},\"first_us\":{:.2f},\"both_over_serial\":{:.3f}}}}}\n",
      o.llama ? "llama" : "gpt2", p.name, width, o.rows, p.first, p.second, xa, ya, xy_first, xy_second,
      std::max(xy_first, xy_second) / (xa + ya), yx_first, yx_second, std::max(yx_first, yx_second) / (xa + ya));
  std::fflush(stdout);
  TANDEM_CUDA_CHECK(cudaEventDestroy(start));
  TANDEM_CUDA_CHECK(cudaEventDestroy(end_a));
  TANDEM_CUDA_CHECK(cudaEventDestroy(end_b));
}

// Measures each pair (--only: the one named) at width C.
void runPairs(const std::vector<Pair>& pairs, int64_t C, const Options& o, cudaStream_t a, cudaStream_t b) {
  for (const Pair& p : pairs) {
    if (!o.only.empty() && p.name != o.only) continue;
    // Each GEMM's first call on each Gemm chooses its algorithm (timed,
    // synchronous): done before anything is timed.
    for (cudaStream_t s : {a, b}) {
      p.x(s);
      p.y(s);
    }
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    measure(p, C, o, a, b);
  }
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

// GPT-2's pairs at width C (the header lists them).
void runWidth(int64_t C, const Options& o, cudaStream_t a, cudaStream_t b, cuda::Gemm& gemm_a, cuda::Gemm& gemm_b) {
  const int64_t M = o.rows, F = 4 * C, H = C / 64, T = o.seq, B = M / T;
  Buffers buf;
  // Layernorm backward operands (dx accumulating into the residual gradient).
  void *ln_dx = buf.bf16(M * C), *ln_dy = buf.bf16(M * C), *ln_x = buf.bf16(M * C);
  void *ln_mean = buf.f32(M), *ln_rstd = buf.f32Constant(M, 1.f), *ln_w = buf.bf16Constant(C, 1.f);
  void *ln_dw = buf.bf16(C), *ln_db = buf.bf16(C);
  float* ln_scratch = static_cast<float*>(buf.zeros(cuda::layernormScratchBytes(C, false)));
  // GEMM operands: activations [M, C] and [M, 4C], their gradients, weights.
  void *x_c = buf.bf16(M * C), *dy_f = buf.bf16(M * F), *dy_c = buf.bf16(M * C), *h_f = buf.bf16(M * F);
  void *dy_qkv = buf.bf16(M * 3 * C), *w_fc = buf.bf16(F * C, 0.02f);
  void *dw_fc = buf.zeros(F * C * 2), *dw_qkv = buf.zeros(3 * C * C * 2), *dw_proj = buf.zeros(C * F * 2);
  void *dw_attn_proj = buf.zeros(C * C * 2), *dx_c = buf.zeros(M * C * 2);
  // Attention operands, its forward run once for consistent outputs.
  void *qkv = buf.bf16(M * 3 * C, 0.5f), *att_out = buf.zeros(M * C * 2), *dout = buf.bf16(M * C);
  void *lse = buf.zeros(B * H * T * 4), *dqkv = buf.zeros(M * 3 * C * 2);
  float* att_scratch = static_cast<float*>(buf.zeros(cuda::attentionScratchBytes(B, T, H, C, false)));
  const bool attention = cuda::attentionRunsHere(C, H, DType::BF16);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  if (attention) cuda::attentionForward(att_out, lse, DType::F32, qkv, B, T, C, H, DType::BF16, a);

  const Launch ln_bwd = [=](cudaStream_t s) {
    cuda::layernormBackward(ln_dx, ln_dw, ln_db, nullptr, ln_dy, ln_x, ln_w, ln_mean, DType::F32, ln_rstd, DType::F32,
                            M, C, true, false, DType::BF16, ln_scratch, s);
  };
  // Each GEMM on the Gemm of the stream it runs on (one workspace each).
  auto gemmOn = [&](cudaStream_t s) -> cuda::Gemm& { return s == a ? gemm_a : gemm_b; };
  const Launch fc_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_fc, dy_f, x_c, M, F, C, false, DType::BF16, s);
  };
  const Launch qkv_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_qkv, dy_qkv, x_c, M, 3 * C, C, false, DType::BF16, s);
  };
  const Launch proj_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_proj, dy_c, h_f, M, C, F, false, DType::BF16, s);
  };
  const Launch fc_dgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardData(dx_c, dy_f, w_fc, M, F, C, false, DType::BF16, s);
  };
  const Launch attn_proj_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_attn_proj, dy_c, x_c, M, C, C, false, DType::BF16, s);
  };
  const Launch attn_bwd = [=](cudaStream_t s) {
    cuda::attentionBackward(dqkv, nullptr, dout, qkv, att_out, lse, DType::F32, B, T, C, H, false, false, DType::BF16,
                            att_scratch, s);
  };
  // Both launch orders are measured: in a step, which of a pair reaches the
  // GPU first depends on what each stream waited for.
  std::vector<Pair> pairs = {
      {"fc_wgrad+ln_bwd", "fc_wgrad", "ln_bwd", fc_wgrad, ln_bwd},
      {"qkv_wgrad+ln_bwd", "qkv_wgrad", "ln_bwd", qkv_wgrad, ln_bwd},
      {"proj_wgrad+fc_dgrad", "proj_wgrad", "fc_dgrad", proj_wgrad, fc_dgrad},
  };
  if (attention) pairs.push_back({"attn_bwd+proj_wgrad", "attn_bwd", "proj_wgrad", attn_bwd, attn_proj_wgrad});
  else fmt::print(stderr, "bench_kernel_pairs: width {}: no attention kernel for {} heads here; pair left out\n", C, H);
  runPairs(pairs, C, o, a, b);
}

// The Llama family's pairs at width C (the header lists them).
void runLlamaWidth(int64_t C, const Options& o, cudaStream_t a, cudaStream_t b, cuda::Gemm& gemm_a,
                   cuda::Gemm& gemm_b) {
  const int64_t M = o.rows, F = (int64_t(o.mlp_ratio * double(C)) + 255) / 256 * 256;
  Buffers buf;
  void *rms_dx = buf.bf16(M * C), *rms_dy = buf.bf16(M * C), *rms_x = buf.bf16(M * C);
  void *rms_rstd = buf.f32Constant(M, 1.f), *rms_w = buf.bf16Constant(C, 1.f), *rms_dw = buf.bf16(C);
  float* rms_scratch = static_cast<float*>(buf.zeros(cuda::rmsnormScratchBytes(C)));
  void *x_c = buf.bf16(M * C), *dy_2f = buf.bf16(M * 2 * F), *dy_c = buf.bf16(M * C), *h_f = buf.bf16(M * F);
  void *w_gateup = buf.bf16(2 * F * C, 0.02f), *dw_gateup = buf.zeros(2 * F * C * 2), *dw_down = buf.zeros(C * F * 2);
  void *dx_c = buf.zeros(M * C * 2), *sw_x = buf.bf16(M * 2 * F), *sw_dy = buf.bf16(M * F);
  void* sw_dx = buf.zeros(M * 2 * F * 2);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  auto gemmOn = [&](cudaStream_t s) -> cuda::Gemm& { return s == a ? gemm_a : gemm_b; };
  const Launch rms_bwd = [=](cudaStream_t s) {
    cuda::rmsnormBackward(rms_dx, rms_dw, rms_dy, rms_x, rms_w, rms_rstd, DType::F32, M, C, true, false, DType::BF16,
                          rms_scratch, s);
  };
  const Launch swiglu_bwd = [=](cudaStream_t s) {
    cuda::swigluBackward(sw_dx, sw_dy, sw_x, M, F, false, DType::BF16, s);
  };
  const Launch gateup_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_gateup, dy_2f, x_c, M, 2 * F, C, false, DType::BF16, s);
  };
  const Launch down_wgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardWeight(dw_down, dy_c, h_f, M, C, F, false, DType::BF16, s);
  };
  const Launch gateup_dgrad = [=, &gemmOn](cudaStream_t s) {
    gemmOn(s).backwardData(dx_c, dy_2f, w_gateup, M, 2 * F, C, false, DType::BF16, s);
  };
  runPairs(
      {
          {"gateup_wgrad+rms_bwd", "gateup_wgrad", "rms_bwd", gateup_wgrad, rms_bwd},
          {"down_wgrad+swiglu_bwd", "down_wgrad", "swiglu_bwd", down_wgrad, swiglu_bwd},
          {"down_wgrad+gateup_dgrad", "down_wgrad", "gateup_dgrad", down_wgrad, gateup_dgrad},
      },
      C, o, a, b);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  if (!tandem::bench::gpusPresent("kernel_pairs")) return 0;
#ifdef TANDEM_HAVE_CUDA
  try {
    cuda::prepareKernels();
    cudaStream_t a, b;
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    void *ws_a = nullptr, *ws_b = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&ws_a, cuda::Gemm::kWorkspaceBytes));
    TANDEM_CUDA_CHECK(cudaMalloc(&ws_b, cuda::Gemm::kWorkspaceBytes));
    {
      cuda::Gemm gemm_a(ws_a, cuda::Gemm::kWorkspaceBytes), gemm_b(ws_b, cuda::Gemm::kWorkspaceBytes);
      for (int64_t C : o.widths) (o.llama ? runLlamaWidth : runWidth)(C, o, a, b, gemm_a, gemm_b);
    }
    TANDEM_CUDA_CHECK(cudaFree(ws_a));
    TANDEM_CUDA_CHECK(cudaFree(ws_b));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_kernel_pairs: error: {}\n", e.what());
    return 1;
  }
#endif
}
