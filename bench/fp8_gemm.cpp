// bench_fp8_gemm: cuBLASLt's FP8 GEMMs against its BF16 GEMMs of the same
// shapes, timed at the clock the GPU holds under each one's own power draw.
// What the simulator's FP8 cost needs (docs/simulator.md, "Compute cost
// model"): how much faster an FP8 GEMM of a training step's shape really
// runs than the BF16 one, where the data sheet says twice.
//
// The shapes: the four GEMMs of a Llama 3.1 layer (query/key/value, output
// projection, gate and up, down) at 8B with tensor parallel 1, 70B with 4
// and 405B with 8, each in its three roles (forward, data gradient, weight
// gradient) at --tokens tokens per micro-batch, and square GEMMs of 4096,
// 8192 and 16384. The FP8 roles follow Transformer Engine's recipes: E4M3
// times E4M3 in the forward with fast accumulation, E4M3 times E5M2 for the
// gradients with the accumulator promoted (no fast accumulation); output
// bf16, per-tensor scales. Every GEMM is in the "TN" layout FP8 needs on
// Hopper, the BF16 one too, so the two differ only in their precision.
// cuBLASLt's first heuristic choice is timed (what the executor and
// Transformer Engine use).
//
// Operands are pseudo-random, never constant: tensor cores draw less power
// on repeated bits, and at the power limit a GEMM's time follows its power.
// Each (shape, precision) first runs back to back for --sustain-ms, then a
// timed burst; the two precisions alternate over --rounds rounds and the
// median round is printed. Where NVML is there, each line also has the
// median SM clock and mean power inside the timed bursts.
//
// One JSON object per shape, then one per model: the layer's GEMM time in
// BF16 and FP8 over its twelve GEMMs, and the speedup.
//
// --yaml FILE writes the measured speedups as a calibration's
// fp8_gemm_speedup section (docs/simulator.md): per GEMM role, [GFLOP,
// speedup] in ascending GFLOP (shapes of equal GFLOP averaged), to paste
// into the GPU's calibration file.
//
//   bench_fp8_gemm [--tokens N] [--rounds N] [--sustain-ms T] [--burst-ms T] [--yaml FILE]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"

#ifdef TANDEM_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#endif
#ifdef TANDEM_HAVE_PROFILER
#include "profiler/power_sampler.h"
#endif

namespace {

struct Options {
  int64_t tokens = 8192;
  int rounds = 3;
  double sustain_ms = 150, burst_ms = 25;
  std::string yaml;  // --yaml FILE: the fp8_gemm_speedup section
};

Options parseOptions(int argc, char** argv) {
  Options o;
  tandem::bench::ArgReader args("bench_fp8_gemm",
                                "[--tokens N] [--rounds N] [--sustain-ms T] [--burst-ms T] [--yaml FILE]", argc, argv);
  while (args.next()) {
    if (args.is("--tokens")) o.tokens = args.integer(16, 65536);
    else if (args.is("--rounds")) o.rounds = int(args.integer(1, 99));
    else if (args.is("--sustain-ms")) o.sustain_ms = args.number(0, 60000);
    else if (args.is("--burst-ms")) o.burst_ms = args.number(1, 10000);
    else if (args.is("--yaml")) o.yaml = args.text();
    else args.unknown();
  }
  if (o.tokens % 16 != 0) args.fail("--tokens must be a multiple of 16 (FP8 GEMMs need leading dimensions of 16)");
  return o;
}

// One GEMM of the list, in cuBLASLt's TN terms: D (m x n) = A^T B with A
// stored k x m and B k x n, both column-major.
struct Shape {
  std::string model, gemm, role;
  int64_t m, n, k;
  double flop() const { return 2.0 * double(m) * double(n) * double(k); }
};

// A linear layer of `out` x `in` weights in its three roles over `tokens`.
void addLinear(std::vector<Shape>& shapes, const std::string& model, const std::string& gemm, int64_t out, int64_t in,
               int64_t tokens) {
  shapes.push_back({model, gemm, "forward", out, tokens, in});
  shapes.push_back({model, gemm, "backward_data", in, tokens, out});
  shapes.push_back({model, gemm, "backward_weight", in, out, tokens});
}

// Llama 3.1 layers (head width 128, 8 key/value heads) split over `tp`.
void addLlamaLayer(std::vector<Shape>& shapes, const std::string& model, int64_t hidden, int64_t ffn, int tp,
                   int64_t tokens) {
  const int64_t kv = 8 * 128;
  addLinear(shapes, model, "qkv", (hidden + 2 * kv) / tp, hidden, tokens);
  addLinear(shapes, model, "attn_out", hidden, hidden / tp, tokens);
  addLinear(shapes, model, "gate_up", 2 * ffn / tp, hidden, tokens);
  addLinear(shapes, model, "down", hidden, ffn / tp, tokens);
}

std::vector<Shape> shapesToTime(int64_t tokens) {
  std::vector<Shape> shapes;
  addLlamaLayer(shapes, "llama3.1-8b-tp1", 4096, 14336, 1, tokens);
  addLlamaLayer(shapes, "llama3.1-70b-tp4", 8192, 28672, 4, tokens);
  addLlamaLayer(shapes, "llama3.1-405b-tp8", 16384, 53248, 8, tokens);
  for (int64_t s : {4096, 8192, 16384}) shapes.push_back({"square", std::to_string(s), "forward", s, s, s});
  return shapes;
}

#ifdef TANDEM_HAVE_CUDA
uint64_t hostNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Deterministic pseudo-random bits (xorshift64*).
struct Bits {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
};

enum class Elem { BF16, E4M3, E5M2 };

// `count` pseudo-random finite values of `e` uploaded to `dst`: bf16 in
// [-2, 2), FP8 any byte but NaN and infinity.
bool fillRandom(void* dst, size_t count, Elem e) {
  const size_t bytes = count * (e == Elem::BF16 ? 2 : 1);
  std::vector<uint8_t> host(bytes);
  Bits bits;
  if (e == Elem::BF16) {
    for (size_t i = 0; i < count; ++i) {
      const float f = float(int64_t(bits.next() >> 40) - (int64_t(1) << 23)) / float(int64_t(1) << 22);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t b = uint16_t(u >> 16);
      std::memcpy(&host[2 * i], &b, 2);
    }
  } else {
    for (size_t i = 0; i < bytes; i += 8) {
      uint64_t r = bits.next();
      for (size_t j = 0; j < 8 && i + j < bytes; ++j, r >>= 8) {
        uint8_t b = uint8_t(r);
        // E4M3's only NaN is S.1111.111; E5M2's exponent 11111 is infinity or NaN.
        if (e == Elem::E4M3 && (b & 0x7F) == 0x7F) b ^= 0x08;
        if (e == Elem::E5M2 && (b & 0x7C) == 0x7C) b &= uint8_t(~0x40);
        host[i + j] = b;
      }
    }
  }
  return cudaMemcpy(dst, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

// Operands sized for the largest shape, shared by all.
struct Gpu {
  cublasLtHandle_t lt = nullptr;
  size_t ws_bytes = size_t(32) << 20;
  void *ws = nullptr, *a16 = nullptr, *b16 = nullptr, *a8 = nullptr, *b8_e4m3 = nullptr, *b8_e5m2 = nullptr,
       *d = nullptr;
  float* scales = nullptr;  // A and B scale, 1.0 each
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
};

bool createGpu(Gpu& g, const std::vector<Shape>& shapes) {
  size_t a = 0, b = 0, d = 0;
  for (const Shape& sh : shapes) {
    a = std::max(a, size_t(sh.m * sh.k));
    b = std::max(b, size_t(sh.k * sh.n));
    d = std::max(d, size_t(sh.m * sh.n));
  }
  if (cublasLtCreate(&g.lt) != CUBLAS_STATUS_SUCCESS) return false;
  bool ok = cudaMalloc(&g.ws, g.ws_bytes) == cudaSuccess && cudaMalloc(&g.a16, a * 2) == cudaSuccess &&
            cudaMalloc(&g.b16, b * 2) == cudaSuccess && cudaMalloc(&g.a8, a) == cudaSuccess &&
            cudaMalloc(&g.b8_e4m3, b) == cudaSuccess && cudaMalloc(&g.b8_e5m2, b) == cudaSuccess &&
            cudaMalloc(&g.d, d * 2) == cudaSuccess && cudaMalloc(&g.scales, 2 * sizeof(float)) == cudaSuccess;
  if (!ok) return false;
  const float ones[2] = {1.f, 1.f};
  ok = cudaMemcpy(g.scales, ones, sizeof(ones), cudaMemcpyHostToDevice) == cudaSuccess &&
       fillRandom(g.a16, a, Elem::BF16) && fillRandom(g.b16, b, Elem::BF16) && fillRandom(g.a8, a, Elem::E4M3) &&
       fillRandom(g.b8_e4m3, b, Elem::E4M3) && fillRandom(g.b8_e5m2, b, Elem::E5M2);
  return ok && cudaStreamCreate(&g.s) == cudaSuccess && cudaEventCreate(&g.e0) == cudaSuccess &&
         cudaEventCreate(&g.e1) == cudaSuccess;
}

// One shape in one precision: descriptor, layouts, the heuristic's first
// algorithm, and the timings of its rounds.
struct Gemm {
  bool fp8 = false;
  int variant = 0;  // FP8GEMM descriptor variant that ran (kFp8Variants)
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t ws = 0;
  const void *A = nullptr, *B = nullptr;
  std::vector<double> us;
  std::vector<std::pair<uint64_t, uint64_t>> bursts;
};

// How the FP8 descriptor is set, tried in order until one runs: 0 as
// Transformer Engine sets it (per-tensor scale pointers, fast accumulation
// in the forward only), 1 without the fast-accumulation attribute, 2
// without scale pointers either (scales of 1).
constexpr int kFp8Variants = 3;

// The FP8 or BF16 GEMM of `sh`; the error when cuBLASLt has none.
std::string createGemm(Gemm& gm, const Shape& sh, bool fp8, const Gpu& g, int variant = 0) {
  gm.fp8 = fp8;
  gm.variant = variant;
  const bool forward = sh.role == "forward";
  cublasLtMatmulDescCreate(&gm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cudaDataType_t at = CUDA_R_16BF, bt = CUDA_R_16BF;
  gm.A = g.a16, gm.B = g.b16;
  if (fp8) {
    at = CUDA_R_8F_E4M3;
    bt = forward ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    gm.A = g.a8, gm.B = forward ? g.b8_e4m3 : g.b8_e5m2;
    const float* sa = g.scales;
    const float* sb = g.scales + 1;
    if (variant < 2) {
      cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa));
      cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb));
    }
    const int8_t fast = forward ? 1 : 0;
    if (variant == 0) cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  }
  cublasLtMatrixLayoutCreate(&gm.la, at, uint64_t(sh.k), uint64_t(sh.m), sh.k);
  cublasLtMatrixLayoutCreate(&gm.lb, bt, uint64_t(sh.k), uint64_t(sh.n), sh.k);
  cublasLtMatrixLayoutCreate(&gm.ld, CUDA_R_16BF, uint64_t(sh.m), uint64_t(sh.n), sh.m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  uint64_t wsb = g.ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(g.lt, gm.desc, gm.la, gm.lb, gm.ld, gm.ld, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || res.state != CUBLAS_STATUS_SUCCESS)
    return fmt::format("cuBLASLt has no {} algorithm for m={} n={} k={} (status {}, {})", fp8 ? "FP8" : "BF16", sh.m,
                       sh.n, sh.k, cublasLtGetStatusString(st), cublasLtGetStatusString(res.state));
  gm.algo = res.algo;
  gm.ws = res.workspaceSize;
  // One launch, checked: a GEMM that cannot run must not be timed as a
  // fast one.
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t run = cublasLtMatmul(g.lt, gm.desc, &alpha, gm.A, gm.la, gm.B, gm.lb, &beta, g.d, gm.ld, g.d,
                                            gm.ld, &gm.algo, g.ws, g.ws_bytes, g.s);
  const cudaError_t done = cudaStreamSynchronize(g.s);
  if (run != CUBLAS_STATUS_SUCCESS || done != cudaSuccess)
    return fmt::format("the {} GEMM m={} n={} k={} does not run: {}, {}", fp8 ? "FP8" : "BF16", sh.m, sh.n, sh.k,
                       cublasLtGetStatusString(run), cudaGetErrorString(done));
  return "";
}

void destroyGemm(Gemm& gm) {
  cublasLtMatrixLayoutDestroy(gm.la);
  cublasLtMatrixLayoutDestroy(gm.lb);
  cublasLtMatrixLayoutDestroy(gm.ld);
  cublasLtMatmulDescDestroy(gm.desc);
}

bool launch(const Gemm& gm, const Gpu& g) {
  const float alpha = 1.f, beta = 0.f;
  return cublasLtMatmul(g.lt, gm.desc, &alpha, gm.A, gm.la, gm.B, gm.lb, &beta, g.d, gm.ld, g.d, gm.ld, &gm.algo,
                        g.ws, g.ws_bytes, g.s) == CUBLAS_STATUS_SUCCESS;
}

// `count` launches between the events: their time in ms.
double timeBurst(const Gemm& gm, const Gpu& g, int count) {
  cudaEventRecord(g.e0, g.s);
  for (int i = 0; i < count; ++i) launch(gm, g);
  cudaEventRecord(g.e1, g.s);
  cudaEventSynchronize(g.e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, g.e0, g.e1);
  return double(ms);
}

// One round of one GEMM: back to back for sustain_ms, then a timed burst of
// about burst_ms.
void timeRound(Gemm& gm, const Gpu& g, const Options& o) {
  double one = std::max(1e-3, timeBurst(gm, g, 3) / 3);
  for (double ran = 0; ran < o.sustain_ms;) {
    const int n = std::max(1, int(5.0 / one));
    const double ms = timeBurst(gm, g, n);
    one = ms / n;
    ran += ms;
  }
  const int reps = std::max(5, int(o.burst_ms / one));
  const uint64_t t0 = hostNs();
  const double ms = timeBurst(gm, g, reps);
  gm.bursts.push_back({t0, hostNs()});
  gm.us.push_back(1000.0 * ms / reps);
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#ifdef TANDEM_HAVE_PROFILER
// NVML samples of this process's GPU every 2 ms; null without its PCI bus id.
std::unique_ptr<tandem::profiler::PowerSampler> startSampler() {
  char bus[32] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) return nullptr;
  auto sampler = std::make_unique<tandem::profiler::PowerSampler>(bus, 2, hostNs);
  if (!sampler->active()) fmt::print(stderr, "bench_fp8_gemm: {}\n", sampler->note());
  return sampler;
}

// The median SM clock and mean power of the samples inside `gm`'s bursts,
// as JSON keys with a leading comma ("" without samples).
std::string clockColumns(const std::vector<tandem::profiler::PowerSample>& samples, const Gemm& gm,
                         const char* prefix) {
  std::vector<double> mhz;
  double watts = 0;
  int n = 0;
  for (const auto& p : samples)
    for (const auto& [b0, b1] : gm.bursts)
      if (p.ts >= b0 && p.ts <= b1) {
        if (p.sm_clock_mhz > 0) mhz.push_back(p.sm_clock_mhz);
        if (p.power_w > 0) watts += p.power_w, ++n;
      }
  if (mhz.empty()) return "";
  return fmt::format(",\"{}_mhz\":{:.0f},\"{}_w\":{:.0f}", prefix, median(mhz), prefix, n ? watts / n : -1.0);
}
#endif

// A model's layer: its GEMMs' median times summed.
struct LayerSum {
  double bf16_us = 0, fp8_us = 0, flop = 0;
  int gemms = 0;
};
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  if (!tandem::bench::gpusPresent("fp8_gemm")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)o;
  return 0;
#else
  int dev = 0;
  cudaDeviceProp prop{};
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&prop, dev);
  if (prop.major < 9 && !(prop.major == 8 && prop.minor == 9)) {
    tandem::bench::printSkipped("fp8_gemm", fmt::format("{} has no FP8 tensor cores (needs sm_89 or newer)", prop.name));
    return 0;
  }
  const std::vector<Shape> shapes = shapesToTime(o.tokens);
  Gpu g;
  if (!createGpu(g, shapes)) {
    fmt::print(stderr, "bench_fp8_gemm: could not set up the operands: {}\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
#ifdef TANDEM_HAVE_PROFILER
  std::unique_ptr<tandem::profiler::PowerSampler> sampler = startSampler();
#endif
  std::vector<Gemm> bf16(shapes.size()), fp8(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string err = createGemm(bf16[i], shapes[i], false, g);
    for (int v = 0; err.empty() && v < kFp8Variants; ++v) {
      const std::string fp8_err = createGemm(fp8[i], shapes[i], true, g, v);
      if (fp8_err.empty()) break;
      fmt::print(stderr, "bench_fp8_gemm: descriptor variant {}: {}\n", v, fp8_err);
      destroyGemm(fp8[i]);
      if (v + 1 == kFp8Variants) err = fp8_err;
    }
    if (!err.empty()) {
      fmt::print(stderr, "bench_fp8_gemm: {} ({} {} {})\n", err, shapes[i].model, shapes[i].gemm, shapes[i].role);
      return 1;
    }
  }
  // Shape by shape, the two precisions alternating round by round, so both
  // see the same thermal state.
  for (size_t i = 0; i < shapes.size(); ++i)
    for (int r = 0; r < o.rounds; ++r) {
      timeRound(bf16[i], g, o);
      timeRound(fp8[i], g, o);
    }
  if (cudaStreamSynchronize(g.s) != cudaSuccess) {
    fmt::print(stderr, "bench_fp8_gemm: CUDA error: {}\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::vector<std::string> clocks(shapes.size());
#ifdef TANDEM_HAVE_PROFILER
  if (sampler && sampler->active()) {
    const auto samples = sampler->stop();
    for (size_t i = 0; i < shapes.size(); ++i)
      clocks[i] = clockColumns(samples, bf16[i], "bf16") + clockColumns(samples, fp8[i], "fp8");
  }
#endif
  std::map<std::string, LayerSum> layers;
  std::vector<std::string> order;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& sh = shapes[i];
    const double b = median(bf16[i].us), f = median(fp8[i].us);
    fmt::print("{{\"bench\":\"fp8_gemm\",\"gpu\":\"{}\",\"model\":\"{}\",\"gemm\":\"{}\",\"role\":\"{}\",\"m\":{},"
               "\"n\":{},\"k\":{},\"bf16_us\":{:.1f},\"fp8_us\":{:.1f},\"bf16_tflops\":{:.0f},\"fp8_tflops\":{:.0f},"
               "\"speedup\":{:.3f},\"fp8_variant\":{},\"rounds\":{}{}}}\n",
               prop.name, sh.model, sh.gemm, sh.role, sh.m, sh.n, sh.k, b, f, sh.flop() / b / 1e6,
               sh.flop() / f / 1e6, b / f, fp8[i].variant, o.rounds, clocks[i]);
    if (sh.model == "square") continue;
    if (!layers.count(sh.model)) order.push_back(sh.model);
    LayerSum& l = layers[sh.model];
    l.bf16_us += b, l.fp8_us += f, l.flop += sh.flop(), ++l.gemms;
  }
  for (const std::string& m : order) {
    const LayerSum& l = layers[m];
    fmt::print("{{\"bench\":\"fp8_gemm_layer\",\"model\":\"{}\",\"tokens\":{},\"gemms\":{},\"bf16_us\":{:.1f},"
               "\"fp8_us\":{:.1f},\"bf16_tflops\":{:.0f},\"fp8_tflops\":{:.0f},\"speedup\":{:.3f}}}\n",
               m, o.tokens, l.gemms, l.bf16_us, l.fp8_us, l.flop / l.bf16_us / 1e6, l.flop / l.fp8_us / 1e6,
               l.bf16_us / l.fp8_us);
  }
  if (!o.yaml.empty()) {
    // Per role (the simulator's op kind), GFLOP -> speedups measured there.
    std::map<std::string, std::map<double, std::vector<double>>> by_role;
    const std::map<std::string, std::string> kind = {
        {"forward", "matmul"}, {"backward_data", "matmul_bwd_data"}, {"backward_weight", "matmul_bwd_weight"}};
    for (size_t i = 0; i < shapes.size(); ++i)
      by_role[kind.at(shapes[i].role)][std::round(shapes[i].flop() * 1e-9 * 1000) / 1000].push_back(
          median(bf16[i].us) / median(fp8[i].us));
    std::ofstream out(o.yaml + ".tmp");
    out << fmt::format("# bench_fp8_gemm on {}, {} tokens per micro-batch, median of {} rounds\nfp8_gemm_speedup:\n",
                       prop.name, o.tokens, o.rounds);
    for (const auto& [role, points] : by_role) {
      out << "  " << role << ": [";
      bool first = true;
      for (const auto& [gflop, s] : points) {
        double mean = 0;
        for (double x : s) mean += x / double(s.size());
        out << fmt::format("{}[{}, {:.3f}]", first ? "" : ", ", gflop, mean);
        first = false;
      }
      out << "]\n";
    }
    out.close();
    if (!out || std::rename((o.yaml + ".tmp").c_str(), o.yaml.c_str()) != 0) {
      fmt::print(stderr, "bench_fp8_gemm: cannot write {}\n", o.yaml);
      std::remove((o.yaml + ".tmp").c_str());
      return 1;
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) destroyGemm(bf16[i]), destroyGemm(fp8[i]);
  cublasLtDestroy(g.lt);
  return 0;
#endif
}
