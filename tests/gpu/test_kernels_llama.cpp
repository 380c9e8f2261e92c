// The Llama family's CUDA kernels (engine/cuda/llama.cu) against the CPU
// reference kernels (engine/cpu/kernels_llama.cpp) on fresh random inputs,
// in fp32 and bf16: RMSNorm, SwiGLU, and grouped-query attention with rotary
// embeddings (1, 2 and all key/value heads; the CUDA-core and the
// tensor-core attention underneath); the FP8 casts (current and delayed
// scaling) bit for bit against engine/numerics/fp8.h, RMSNorm and SwiGLU
// writing FP8 (delayed scaling), delayed scaling's history, and the byte
// transpose of FP8 operands.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>
#include <tuple>
#include <utility>

#include "engine/cpu/kernels.h"
#include "engine/cuda/check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/numerics/fp8.h"
#include "engine/numerics/fp8_history.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/kernel_test_util.h"

using namespace tandem;
using namespace tandem::gputest;

namespace {

void testRmsnorm(DType dt, int64_t M, int64_t C) {
  auto x = rounded(randomVector(M * C, rng), dt), w = rounded(randomVector(C, rng, 0.5f), dt),
       dy = rounded(randomVector(M * C, rng), dt), dx0 = rounded(randomVector(M * C, rng), dt),
       dw0 = rounded(randomVector(C, rng), dt);
  std::vector<float> y(M * C), rstd(M);
  cpu::rmsnormForward<float>(y.data(), rstd.data(), x.data(), w.data(), M, C);
  const std::string shape = fmt::format(" M{} C{}", M, C);
  for (DType rstd_dt : {DType::F32, DType::BF16}) {
    Dev gx(dt, M * C), gw(dt, C), gy(dt, M * C), gr(rstd_dt, M);
    gx.upload(x), gw.upload(w);
    cuda::rmsnormForward(gy.p, gr.p, gr.dt, gx.p, gw.p, M, C, dt, nullptr);
    const std::string side = fmt::format("{} rstd {}", shape, toString(rstd_dt));
    expectBelow(tag(dt, ("rmsnorm forward y" + side).c_str()), relError(gy.download(), y), tol(dt));
    expectBelow(tag(dt, ("rmsnorm forward rstd" + side).c_str()), relError(gr.download(), rounded(rstd, rstd_dt)),
                rstd_dt == DType::BF16 ? 4e-3 : 1e-5);
  }
  // Backward from the reference rstd: dx accumulating, dw written fresh and
  // then accumulating; dx in place over dy.
  for (const bool accumulate : {false, true}) {
    std::vector<float> dx = accumulate ? dx0 : std::vector<float>(M * C), dw = accumulate ? dw0 : std::vector<float>(C);
    cpu::rmsnormBackward<float>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), M, C, accumulate,
                                accumulate);
    Dev gx(dt, M * C), gw(dt, C), gdy(dt, M * C), gdx(dt, M * C), gdw(dt, C), gr(DType::F32, M);
    gx.upload(x), gw.upload(w), gdy.upload(dy), gr.upload(rstd);
    if (accumulate) gdx.upload(dx0), gdw.upload(dw0);
    cuda::rmsnormBackward(gdx.p, gdw.p, gdy.p, gx.p, gw.p, gr.p, gr.dt, M, C, accumulate, accumulate, dt,
                          scratchBuffer(cuda::rmsnormScratchBytes(C)), nullptr);
    const std::string how = shape + (accumulate ? " (accumulate)" : "");
    expectBelow(tag(dt, ("rmsnorm backward dx" + how).c_str()), relError(gdx.download(), dx), tol(dt));
    expectBelow(tag(dt, ("rmsnorm backward dw" + how).c_str()), relError(gdw.download(), dw), tol(dt));
    if (!accumulate) {
      cuda::rmsnormBackward(gdy.p, gdw.p, gdy.p, gx.p, gw.p, gr.p, gr.dt, M, C, false, false, dt,
                            scratchBuffer(cuda::rmsnormScratchBytes(C)), nullptr);
      expectBelow(tag(dt, ("rmsnorm backward dx in place over dy" + how).c_str()), relError(gdy.download(), dx),
                  tol(dt));
      expectBelow(tag(dt, ("rmsnorm backward dw, dx in place" + how).c_str()), relError(gdw.download(), dw), tol(dt));
    }
  }
}

void testSwiglu(DType dt, int64_t M, int64_t F) {
  auto x = rounded(randomVector(M * 2 * F, rng, 2.f), dt), dy = rounded(randomVector(M * F, rng), dt),
       dx0 = rounded(randomVector(M * 2 * F, rng), dt);
  std::vector<float> y(M * F);
  cpu::swigluForward<float>(y.data(), x.data(), M, F);
  Dev gx(dt, x.size()), gy(dt, y.size()), gdy(dt, dy.size()), gdx(dt, x.size());
  gx.upload(x), gdy.upload(dy);
  cuda::swigluForward(gy.p, gx.p, M, F, dt, nullptr);
  const std::string shape = fmt::format(" M{} F{}", M, F);
  expectBelow(tag(dt, ("swiglu forward" + shape).c_str()), relError(gy.download(), y), tol(dt));
  for (const bool accumulate : {false, true}) {
    std::vector<float> dx = accumulate ? dx0 : std::vector<float>(x.size());
    cpu::swigluBackward<float>(dx.data(), dy.data(), x.data(), M, F, accumulate);
    if (accumulate) gdx.upload(dx0);
    cuda::swigluBackward(gdx.p, gdy.p, gx.p, M, F, accumulate, dt, nullptr);
    expectBelow(tag(dt, ("swiglu backward" + shape + (accumulate ? " (accumulate)" : "")).c_str()),
                relError(gdx.download(), dx), tol(dt));
  }
}

// SwiGLU writing the partial maxima of its output for an FP8 cast
// (gpu_footprint::fp8AmaxProducers): their largest is that of the stored
// output, forward and backward, with and without accumulation, and the cast
// that reads them instead of its own pass writes the CPU's codes.
void testSwigluAmax(DType dt, int64_t M, int64_t F) {
  auto x = rounded(randomVector(M * 2 * F, rng, 2.f), dt), dy = rounded(randomVector(M * F, rng), dt),
       dx0 = rounded(randomVector(M * 2 * F, rng), dt);
  Dev gx(dt, x.size()), gy(dt, size_t(M * F)), gdy(dt, dy.size()), gdx(dt, x.size());
  gx.upload(x), gdy.upload(dy);
  float* partials = scratchBuffer(size_t(gpu_footprint::kFp8AmaxBlocks) * 4);
  auto check = [&](const std::string& what, const Dev& out, int64_t rows, int64_t cols) {
    const std::vector<float> stored = out.download();
    float want = 0;
    for (float v : stored) want = std::max(want, std::fabs(v));
    std::vector<float> p(size_t(gpu_footprint::kFp8AmaxBlocks));
    cudaMemcpy(p.data(), partials, p.size() * 4, cudaMemcpyDeviceToHost);
    const float got = *std::max_element(p.begin(), p.end());
    expectTrue(tag(dt, fmt::format("{}: the partial maxima's largest {} is the output's {}", what, got, want).c_str()),
               got == want);
    uint8_t *codes = nullptr, *codes_t = nullptr;
    float* inv = nullptr;
    cudaMalloc(&codes, size_t(rows * cols));
    cudaMalloc(&codes_t, size_t(rows * cols));
    cudaMalloc(&inv, 512);
    cuda::fp8CastTransposeCurrentScaling(codes, codes_t, out.p, dt, rows, cols, Fp8Format::E5M2, inv, inv + 64,
                                         partials, true, nullptr);
    std::vector<uint8_t> got_codes(static_cast<size_t>(rows * cols));
    cudaMemcpy(got_codes.data(), codes, got_codes.size(), cudaMemcpyDeviceToHost);
    cudaFree(codes);
    cudaFree(codes_t);
    cudaFree(inv);
    const float scale = fp8Scale(want, Fp8Format::E5M2);
    int64_t differ = 0;
    for (size_t i = 0; i < stored.size(); ++i)
      differ += got_codes[i] != fp8FromFloat(stored[i] * scale, Fp8Format::E5M2);
    expectTrue(tag(dt, fmt::format("{}: the cast from those maxima, {} codes differ from the CPU's", what,
                                   differ).c_str()),
               differ == 0);
  };
  const std::string shape = fmt::format(" M{} F{}", M, F);
  cuda::swigluForward(gy.p, gx.p, M, F, dt, nullptr, partials);
  check("swiglu forward" + shape, gy, M, F);
  for (const bool accumulate : {false, true}) {
    gdx.upload(dx0);
    cuda::swigluBackward(gdx.p, gdy.p, gx.p, M, F, accumulate, dt, nullptr, partials);
    check("swiglu backward" + shape + (accumulate ? " (accumulate)" : ""), gdx, M, 2 * F);
  }
}

// Each part of a grouped row (queries | keys | values of every group) on its
// own, so a small part cannot hide in the whole.
void expectGroupedParts(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                        int64_t rows, int64_t H, int64_t KV, int64_t D, double limit) {
  const int64_t R = H / KV, width = (H + 2 * KV) * D;
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a, b;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t g = 0; g < KV; ++g) {
        const int64_t begin = row * width + g * (R + 2) * D + (part == 0 ? 0 : (R + part - 1) * D);
        const int64_t len = part == 0 ? R * D : D;
        a.insert(a.end(), got.begin() + begin, got.begin() + begin + len);
        b.insert(b.end(), want.begin() + begin, want.begin() + begin + len);
      }
    expectBelow(what + " " + names[part], relError(a, b), limit);
  }
}

void testGroupedAttention(DType dt, int64_t B, int64_t T, int64_t C, int64_t H, int64_t KV, bool accumulate) {
  const int64_t D = C / H, width = (H + 2 * KV) * D;
  auto qkv = rounded(randomVector(B * T * width, rng), dt), dout = rounded(randomVector(B * T * C, rng), dt);
  std::vector<float> out(B * T * C), lse(B * H * T);
  cpu::groupedAttentionForward<float>(out.data(), lse.data(), qkv.data(), B, T, C, H, KV);
  const int64_t el = int64_t(dtypeSize(dt));
  Dev gq(dt, qkv.size()), go(dt, out.size()), gl(DType::F32, lse.size()), gdo(dt, dout.size()), gdq(dt, qkv.size());
  gq.upload(qkv), gdo.upload(dout);
  cuda::groupedAttentionForward(go.p, gl.p, gl.dt, gq.p, B, T, C, H, KV, dt,
                                scratchBuffer(cuda::groupedAttentionScratchBytes(B, T, H, C, KV, el, false)), nullptr);
  const std::string shape = fmt::format("B{} T{} C{} H{} KV{}{}{}", B, T, C, H, KV, accumulate ? " (accumulate)" : "",
                                        dt == DType::BF16 && (D == 64 || D == 128)
                                            ? fmt::format(" [tensor cores, {}]", cuda::attentionMmaPath())
                                            : "");
  // The reference rotates in double and keeps the rotated q and k in fp32;
  // the GPU stores them in dt before the attention reads them.
  expectBelow(tag(dt, ("grouped attention forward out " + shape).c_str()), relError(go.download(), out), tol(dt));
  expectBelow(tag(dt, ("grouped attention forward lse " + shape).c_str()), relError(gl.download(), lse),
              dt == DType::BF16 ? 1e-3 : 1e-5);
  auto out_r = rounded(out, dt);
  std::vector<float> dqkv = accumulate ? rounded(randomVector(qkv.size(), rng), dt) : std::vector<float>(qkv.size());
  if (accumulate) gdq.upload(dqkv);
  cpu::groupedAttentionBackward<float>(dqkv.data(), dout.data(), qkv.data(), out_r.data(), lse.data(), B, T, C, H, KV,
                                       accumulate);
  Dev go2(dt, out.size()), gl2(DType::F32, lse.size());
  go2.upload(out_r), gl2.upload(lse);
  cuda::groupedAttentionBackward(gdq.p, gdo.p, gq.p, go2.p, gl2.p, DType::F32, B, T, C, H, KV, accumulate, dt,
                                 scratchBuffer(cuda::groupedAttentionScratchBytes(B, T, H, C, KV, el, true)), nullptr);
  expectGroupedParts(tag(dt, ("grouped attention backward " + shape).c_str()), gdq.download(), dqkv, B * T, H, KV, D,
                     dt == DType::BF16 ? 1e-2 : 1e-4);
}

// RMSNorm forward and backward twice on the same rows: the same bits.
void testRmsnormDeterministic(int64_t M, int64_t C, const char* what) {
  const DType dt = DType::BF16;
  auto x = rounded(randomVector(M * C, rng), dt), w = rounded(randomVector(C, rng), dt),
       dy = rounded(randomVector(M * C, rng), dt);
  Dev gx(dt, M * C), gw(dt, C), gdy(dt, M * C), gy(dt, M * C), gr(DType::F32, M), gdx(dt, M * C), gdw(dt, C);
  gx.upload(x), gw.upload(w), gdy.upload(dy);
  auto norm = [&] {
    cuda::rmsnormForward(gy.p, gr.p, gr.dt, gx.p, gw.p, M, C, dt, nullptr);
    cuda::rmsnormBackward(gdx.p, gdw.p, gdy.p, gx.p, gw.p, gr.p, gr.dt, M, C, false, false, dt,
                          scratchBuffer(cuda::rmsnormScratchBytes(C)), nullptr);
    return std::make_tuple(gy.download(), gdx.download(), gdw.download());
  };
  expectTrue(fmt::format("[bf16] rmsnorm {}forward and backward: a second run, bit for bit", what).c_str(),
             norm() == norm());
}

// A replay of the same launches gives the same bits (no atomics): the
// weight gradient's fixed slices, the fold's fixed head order.
void testDeterministic() {
  const DType dt = DType::BF16;
  const int64_t B = 2, T = 200, H = 8, KV = 2, Cq = 512;
  testRmsnormDeterministic(3000, 512, "");
  testRmsnormDeterministic(600, 4096, "4096 wide (a block per row) ");
  testRmsnormDeterministic(3000, 2048, "2048 wide (sums in shared memory) ");
  const int64_t width = (H + 2 * KV) * (Cq / H);
  auto qkv = rounded(randomVector(B * T * width, rng), dt), dout = rounded(randomVector(B * T * Cq, rng), dt);
  Dev gq(dt, qkv.size()), go(dt, B * T * Cq), gl(DType::F32, B * H * T), gdo(dt, dout.size()), gdq(dt, qkv.size());
  gq.upload(qkv), gdo.upload(dout);
  auto attention = [&] {
    cuda::groupedAttentionForward(go.p, gl.p, gl.dt, gq.p, B, T, Cq, H, KV, dt,
                                  scratchBuffer(cuda::groupedAttentionScratchBytes(B, T, H, Cq, KV, 2, true)), nullptr);
    cuda::groupedAttentionBackward(gdq.p, gdo.p, gq.p, go.p, gl.p, DType::F32, B, T, Cq, H, KV, false, dt,
                                   scratchBuffer(cuda::groupedAttentionScratchBytes(B, T, H, Cq, KV, 2, true)), nullptr);
    return std::make_pair(go.download(), gdq.download());
  };
  expectTrue("[bf16] grouped attention forward and backward: a second run, bit for bit", attention() == attention());
}

}  // namespace

// The cast of n values of `dt` (the 16-byte path where n % 8 == 0 in bf16):
// every code and the scale's inverse as the CPU reference computes them.
void testFp8Cast(DType dt, int64_t n, Fp8Format format, float spread) {
  std::vector<float> x = rounded(randomVector(size_t(n), rng, spread), dt);
  if (n > 10) x[size_t(n / 3)] = 0.0f, x[size_t(n / 2)] = -x[size_t(n / 2)];
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = fp8Scale(amax, format);
  Dev gx(dt, size_t(n));
  gx.upload(x);
  uint8_t* codes = nullptr;
  float* scale_inv = nullptr;
  cudaMalloc(&codes, size_t(n));
  cudaMalloc(&scale_inv, sizeof(float));
  cuda::fp8CastCurrentScaling(codes, gx.p, dt, n, format, scale_inv,
                              scratchBuffer(size_t(gpu_footprint::kFp8AmaxBlocks) * 4), false, nullptr);
  std::vector<uint8_t> got(static_cast<size_t>(n));
  float got_inv = 0;
  cudaMemcpy(got.data(), codes, size_t(n), cudaMemcpyDeviceToHost);
  cudaMemcpy(&got_inv, scale_inv, sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(codes);
  cudaFree(scale_inv);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += got[size_t(i)] != fp8FromFloat(x[size_t(i)] * scale, format);
  const std::string what = fmt::format("{} cast of {} values (amax {:.3g})", format == Fp8Format::E4M3 ? "E4M3" : "E5M2",
                                       n, amax);
  expectTrue(tag(dt, (what + ": every code as the CPU's, " + std::to_string(differ) + " differ").c_str()), differ == 0);
  expectTrue(tag(dt, (what + ": 1 / scale as the CPU's").c_str()), got_inv == 1.0f / scale);
}

// The cast that also writes the transposed copy: both copies' codes and
// 1 / scale as the CPU reference's cast and transpose.
void testFp8CastTranspose(DType dt, int64_t rows, int64_t cols, Fp8Format format) {
  const int64_t n = rows * cols;
  std::vector<float> x = rounded(randomVector(size_t(n), rng, 2.0f), dt);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = fp8Scale(amax, format);
  Dev gx(dt, size_t(n));
  gx.upload(x);
  uint8_t *codes = nullptr, *codes_t = nullptr;
  float* scale_inv = nullptr;
  cudaMalloc(&codes, size_t(n));
  cudaMalloc(&codes_t, size_t(n));
  cudaMalloc(&scale_inv, 512);
  cuda::fp8CastTransposeCurrentScaling(codes, codes_t, gx.p, dt, rows, cols, format, scale_inv, scale_inv + 64,
                                       scratchBuffer(size_t(gpu_footprint::kFp8AmaxBlocks) * 4), false, nullptr);
  std::vector<uint8_t> got(static_cast<size_t>(n)), got_t(static_cast<size_t>(n));
  float inv[2] = {0, 0};
  cudaMemcpy(got.data(), codes, size_t(n), cudaMemcpyDeviceToHost);
  cudaMemcpy(got_t.data(), codes_t, size_t(n), cudaMemcpyDeviceToHost);
  cudaMemcpy(&inv[0], scale_inv, sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&inv[1], scale_inv + 64, sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(codes);
  cudaFree(codes_t);
  cudaFree(scale_inv);
  int64_t differ = 0, differ_t = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t want = fp8FromFloat(x[size_t(r * cols + c)] * scale, format);
      differ += got[size_t(r * cols + c)] != want;
      differ_t += got_t[size_t(c * rows + r)] != want;
    }
  const std::string what = fmt::format("{} cast-transpose of {} x {}", format == Fp8Format::E4M3 ? "E4M3" : "E5M2",
                                       rows, cols);
  expectTrue(tag(dt, fmt::format("{}: codes as the CPU's, {} differ; transposed, {} differ", what, differ,
                                 differ_t).c_str()),
             differ == 0 && differ_t == 0);
  expectTrue(tag(dt, (what + ": 1 / scale as the CPU's in both slots").c_str()),
             inv[0] == 1.0f / scale && inv[1] == 1.0f / scale);
}

// Device bytes of their own (scratchBuffer's are shared by every caller).
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t n) { cudaMalloc(&p, n); }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
};

// One delayed-scaling key on the device (Fp8DelayedState of one key) and
// the 1 / scale slots of what it writes.
struct DelayedKey {
  Fp8Format format;
  DeviceBytes memory{size_t(gpu_footprint::fp8DelayedStateBytes(1)) + 512};
  cuda::Fp8DelayedState state;
  float* inv = nullptr;  // two slots, 64 floats apart
  explicit DelayedKey(Fp8Format f) : format(f) {
    state = cuda::fp8DelayedStateAt(memory.p, 1);
    cudaMemset(state.amax, 0, 4);
    cudaMemset(state.count, 0, 4);
    const int is_e5m2 = f == Fp8Format::E5M2;
    cudaMemcpy(state.format, &is_e5m2, 4, cudaMemcpyHostToDevice);
    inv = reinterpret_cast<float*>(memory.bytes() + gpu_footprint::fp8DelayedStateBytes(1));
  }
  void setScale(float s) {
    cudaMemcpy(state.scale, &s, 4, cudaMemcpyHostToDevice);
    cudaMemset(state.amax, 0, 4);
  }
  cuda::Fp8Write write(bool transposed = false) const {
    cuda::Fp8Write w;
    w.format = format;
    w.scale = state.scale;
    w.amax = state.amax;
    w.scale_inv = inv;
    w.scale_inv_t = transposed ? inv + 64 : nullptr;
    return w;
  }
  float get(const float* p) const {
    float v = 0;
    cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost);
    return v;
  }
  float amax() const { return get(reinterpret_cast<const float*>(state.amax)); }
};

std::vector<uint8_t> downloadCodes(const uint8_t* p, size_t n) {
  std::vector<uint8_t> v(n);
  cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost);
  return v;
}

const char* formatName(Fp8Format f) { return f == Fp8Format::E4M3 ? "E4M3" : "E5M2"; }

// Delayed scaling's casts: the codes of x times the key's scale (not x's
// own amax), bit for bit, and x's amax left in the key.
void testFp8CastDelayed(DType dt, int64_t rows, int64_t cols, Fp8Format format) {
  const int64_t n = rows * cols;
  std::vector<float> x = rounded(randomVector(size_t(n), rng, 3.0f), dt);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = fp8Scale(amax * 0.5f, format);  // an older, smaller amax: some codes saturate
  DelayedKey key(format);
  Dev gx(dt, size_t(n));
  gx.upload(x);
  DeviceBytes out(size_t(2 * n));
  uint8_t* codes = out.bytes();
  for (const bool transposed : {false, true}) {
    key.setScale(scale);
    if (transposed) cuda::fp8CastTransposeDelayed(codes, codes + n, gx.p, dt, rows, cols, key.write(true), nullptr);
    else cuda::fp8CastDelayed(codes, gx.p, dt, n, key.write(), nullptr);
    const std::vector<uint8_t> got = downloadCodes(codes, size_t(2 * n));
    int64_t differ = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t want = fp8FromFloat(x[size_t(r * cols + c)] * scale, format);
        differ += got[size_t(r * cols + c)] != want;
        if (transposed) differ += got[size_t(n + c * rows + r)] != want;
      }
    const std::string what = fmt::format("delayed {} cast{} of {} x {}", formatName(format),
                                         transposed ? "-transpose" : "", rows, cols);
    expectTrue(tag(dt, fmt::format("{}: codes as the CPU's at the key's scale, {} differ", what, differ).c_str()),
               differ == 0);
    expectTrue(tag(dt, fmt::format("{}: the key's amax {} is the input's {}", what, key.amax(), amax).c_str()),
               key.amax() == amax);
    expectTrue(tag(dt, (what + ": 1 / scale for the GEMM").c_str()),
               key.get(key.inv) == 1.0f / scale && (!transposed || key.get(key.inv + 64) == 1.0f / scale));
  }
}

// Codes of values the GPU computed in fp32 against the CPU's (computed in
// double, then float): the two may round a value on either side of a code
// boundary, so a code may differ by one step, rarely. A step is one code
// apart in the format's order (in the subnormal range a step is a fixed
// 2^-9 or 2^-16, far more than a quarter of a tiny value: a LayerNorm
// output that cancels to near zero met it at 4096 x 1024). Values below a
// millionth of the format's largest (the tensor's amax, at the key's
// scale) are compared in absolute terms: fp32 arithmetic leaves them
// relatively inexact (GELU's gradient as the GPU computes it, 0.5 (1 +
// tanh u), cancels for x below about -4; the CPU's sigmoid form does not),
// and codes that small carry nothing of the tensor.
void expectCodesClose(const std::string& what, const std::vector<uint8_t>& got, const std::vector<float>& values,
                      float scale, Fp8Format format) {
  const float floor = (format == Fp8Format::E4M3 ? 448.f : 57344.f) * std::ldexp(1.f, -20);
  int64_t differ = 0, far = 0;
  std::string first_far;
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t want = fp8FromFloat(values[i] * scale, format);
    if (got[i] == want) continue;
    ++differ;
    const float a = fp8ToFloat(got[i], format), b = fp8ToFloat(want, format);
    auto order = [](uint8_t code) { return code & 0x80 ? -int(code & 0x7f) : int(code & 0x7f); };  // sign, magnitude
    if (std::abs(order(got[i]) - order(want)) <= 1 || std::fabs(a - b) <= floor) continue;
    if (far++ == 0) first_far = fmt::format(" (first: value {:.6g} at the scale, code {:#04x} against {:#04x})",
                                            values[i] * scale, got[i], want);
  }
  expectTrue(fmt::format("{}: {} of {} codes one step from the CPU's, {} further{}", what, differ, values.size(), far,
                         first_far),
             far == 0 && differ * 100 <= int64_t(values.size()));
}

// A writer's transposed copy ([cols, rows] at codes_t) holds the codes of
// its row-major output, and 1 / scale went into both layouts' slots.
void expectTransposedCopy(const std::string& what, const std::vector<uint8_t>& got, const uint8_t* codes_t,
                          int64_t rows, int64_t cols, DelayedKey& key, float scale) {
  const std::vector<uint8_t> got_t = downloadCodes(codes_t, got.size());
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) differ += got_t[size_t(c * rows + r)] != got[size_t(r * cols + c)];
  expectTrue(fmt::format("{}: the transposed copy holds the same codes, {} differ; 1 / scale in both slots", what,
                         differ),
             differ == 0 && key.get(key.inv) == 1.0f / scale && key.get(key.inv + 64) == 1.0f / scale);
}

// The grouped attention's backward writing its gradient as FP8 codes in
// both layouts (training.fp8_attention_grad): against its bf16 twin's
// gradient (the same kernels storing bf16), the amax of the values, the
// transposed copy the same codes. The fused writer quantizes the fp32
// values, which the twin rounded to bf16: each code must lie between the
// codes of the twin's value less and more half a bf16 step (at most 2^-8
// of it), where its fp32 value lies (a code one step off the twin's is no error
// where bf16's rounding crossed the FP8 one: 1.01% of the codes at heads
// 128 wide). Sequences not a multiple of 4 long are refused.
void testGroupedAttentionFp8(int64_t B, int64_t T, int64_t C, int64_t H, int64_t KV) {
  const DType dt = DType::BF16;
  const int64_t D = C / H, width = (H + 2 * KV) * D, rows = B * T, n = rows * width;
  const std::string shape = fmt::format(" B{} T{} C{} H{} KV{} [{}]", B, T, C, H, KV, cuda::attentionMmaPath());
  auto qkv = rounded(randomVector(n, rng), dt), dout = rounded(randomVector(B * T * C, rng), dt);
  Dev gq(dt, qkv.size()), go(dt, size_t(B * T * C)), gl(DType::F32, size_t(B * H * T)), gdo(dt, dout.size()),
      gdq(dt, qkv.size());
  gq.upload(qkv), gdo.upload(dout);
  const int64_t el = int64_t(dtypeSize(dt));
  float* scratch = scratchBuffer(cuda::groupedAttentionScratchBytes(B, T, H, C, KV, el, true));
  cuda::groupedAttentionForward(go.p, gl.p, gl.dt, gq.p, B, T, C, H, KV, dt, scratch, nullptr);
  cuda::groupedAttentionBackward(gdq.p, gdo.p, gq.p, go.p, gl.p, gl.dt, B, T, C, H, KV, false, dt, scratch, nullptr);
  const std::vector<float> want = gdq.download();
  float amax = 0;
  for (float v : want) amax = std::max(amax, std::fabs(v));
  const Fp8Format format = Fp8Format::E5M2;  // a gradient's
  DelayedKey key(format);
  const float scale = fp8Scale(amax, format);
  key.setScale(scale);
  DeviceBytes out(size_t(2 * n));
  uint8_t* codes = out.bytes();
  bool threw = false;
  try {
    cuda::groupedAttentionBackwardFp8(codes, codes + n, gdo.p, gq.p, go.p, gl.p, gl.dt, B, T, C, H, KV, dt,
                                      key.write(true), scratch, nullptr);
  } catch (const cuda::CudaError& e) {
    threw = true;
    expectTrue(tag(dt, ("grouped attention backward FP8" + shape + " refused: " + e.what()).c_str()), T % 4 != 0);
  }
  if (T % 4 != 0) {
    expectTrue(tag(dt, ("grouped attention backward FP8" + shape + ": sequences not a multiple of 4 refused").c_str()),
               threw);
    return;
  }
  const std::vector<uint8_t> got = downloadCodes(codes, size_t(n));
  auto order = [](uint8_t code) { return code & 0x80 ? -int(code & 0x7f) : int(code & 0x7f); };  // sign, magnitude
  int64_t outside = 0, off_twin = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float v = want[i] * scale, half = std::fabs(v) * std::ldexp(1.f, -8);
    const int lo = order(fp8FromFloat(v - half, format)), hi = order(fp8FromFloat(v + half, format));
    const int o = order(got[i]);
    outside += o < std::min(lo, hi) || o > std::max(lo, hi);
    off_twin += got[i] != fp8FromFloat(v, format);
  }
  expectTrue(tag(dt, fmt::format("grouped attention backward FP8 both layouts{}: {} of {} codes off the twin's, {} "
                                 "outside its value's bf16 rounding",
                                 shape, off_twin, want.size(), outside)
                         .c_str()),
             outside == 0);
  // The twin's amax is of bf16 roundings: within half a bf16 step.
  expectBelow(tag(dt, ("grouped attention backward FP8 amax" + shape).c_str()), std::fabs(key.amax() - amax) / amax,
              4e-3);
  expectTransposedCopy(tag(dt, ("grouped attention backward FP8" + shape).c_str()), got, codes + n, rows, width, key,
                       scale);
}

// RMSNorm and SwiGLU writing FP8 at the key's scale, with and without the
// transposed copy: codes as the CPU's values' (expectCodesClose), the amax
// of those values, RMSNorm's rstd.
void testFp8Writers(DType dt, int64_t M, int64_t C, int64_t F) {
  const std::string shape = fmt::format(" M{} C{} F{}", M, C, F);
  for (const bool both : {false, true}) {
    auto x = rounded(randomVector(M * C, rng), dt), w = rounded(randomVector(C, rng, 0.5f), dt);
    std::vector<float> y(static_cast<size_t>(M * C)), rstd(static_cast<size_t>(M));
    cpu::rmsnormForward<float>(y.data(), rstd.data(), x.data(), w.data(), M, C);
    float amax = 0;
    for (float v : y) amax = std::max(amax, std::fabs(v));
    DelayedKey key(Fp8Format::E4M3);
    const float scale = fp8Scale(amax, Fp8Format::E4M3);
    key.setScale(scale);
    Dev gx(dt, size_t(M * C)), gw(dt, size_t(C)), gr(DType::F32, size_t(M));
    gx.upload(x), gw.upload(w);
    DeviceBytes out(size_t(2 * M * C));
    uint8_t* codes = out.bytes();
    uint8_t* codes_t = both ? codes + M * C : nullptr;
    cuda::rmsnormForwardFp8(codes, codes_t, gr.p, gr.dt, gx.p, gw.p, M, C, dt, key.write(both), nullptr);
    const std::string what = "rmsnorm forward FP8" + shape + (both ? " both layouts" : "");
    const std::vector<uint8_t> got = downloadCodes(codes, y.size());
    expectCodesClose(tag(dt, what.c_str()), got, y, scale, Fp8Format::E4M3);
    expectBelow(tag(dt, (what + " rstd").c_str()), relError(gr.download(), rstd), 1e-5);
    expectBelow(tag(dt, (what + " amax").c_str()), std::fabs(key.amax() - amax) / amax, 1e-5);
    if (both) expectTransposedCopy(tag(dt, what.c_str()), got, codes_t, M, C, key, scale);
  }
  auto x = rounded(randomVector(M * 2 * F, rng, 2.f), dt), dy = rounded(randomVector(M * F, rng), dt);
  std::vector<float> y(static_cast<size_t>(M * F)), dx(static_cast<size_t>(M * 2 * F));
  cpu::swigluForward<float>(y.data(), x.data(), M, F);
  cpu::swigluBackward<float>(dx.data(), dy.data(), x.data(), M, F, false);
  Dev gx(dt, x.size()), gdy(dt, dy.size());
  gx.upload(x), gdy.upload(dy);
  DeviceBytes out(2 * dx.size());
  uint8_t* codes = out.bytes();
  uint8_t* codes_t = codes + dx.size();
  for (const bool backward : {false, true})
    for (const bool both : {false, true}) {  // the transposed copy too (OpAttrs::fp8_transposed_out)
      const std::vector<float>& want = backward ? dx : y;
      const int64_t cols = backward ? 2 * F : F;
      float amax = 0;
      for (float v : want) amax = std::max(amax, std::fabs(v));
      const Fp8Format format = backward ? Fp8Format::E5M2 : Fp8Format::E4M3;
      DelayedKey key(format);
      const float scale = fp8Scale(amax, format);
      key.setScale(scale);
      uint8_t* t = both ? codes_t : nullptr;
      if (backward) cuda::swigluBackwardFp8(codes, t, gdy.p, gx.p, M, F, dt, key.write(both), nullptr);
      else cuda::swigluForwardFp8(codes, t, gx.p, M, F, dt, key.write(both), nullptr);
      const std::string what = std::string(backward ? "swiglu backward FP8" : "swiglu forward FP8") + shape +
                               (both ? " both layouts" : "");
      const std::vector<uint8_t> got = downloadCodes(codes, want.size());
      expectCodesClose(tag(dt, what.c_str()), got, want, scale, format);
      expectBelow(tag(dt, (what + " amax").c_str()), std::fabs(key.amax() - amax) / amax, 1e-5);
      if (both) expectTransposedCopy(tag(dt, what.c_str()), got, codes_t, M, cols, key, scale);
    }
}

// GPT-2's FP8 writers under delayed scaling: LayerNorm (its mean and rstd
// too), GELU and GELU's gradient, each in both layouts, against the CPU's
// values (bf16 inputs; the tiled kernels are the only path).
void testFp8WritersGpt2(int64_t M, int64_t C) {
  const std::string shape = fmt::format(" M{} C{}", M, C);
  const DType dt = DType::BF16;
  auto check = [&](const std::string& what, const std::vector<float>& want, Fp8Format format,
                   const std::function<void(uint8_t*, uint8_t*, const cuda::Fp8Write&)>& run) {
    float amax = 0;
    for (float v : want) amax = std::max(amax, std::fabs(v));
    DelayedKey key(format);
    const float scale = fp8Scale(amax, format);
    key.setScale(scale);
    DeviceBytes out(2 * want.size());
    uint8_t* codes = out.bytes();
    uint8_t* codes_t = codes + want.size();
    run(codes, codes_t, key.write(true));
    const std::vector<uint8_t> got = downloadCodes(codes, want.size());
    expectCodesClose(tag(dt, (what + shape).c_str()), got, want, scale, format);
    expectBelow(tag(dt, (what + shape + " amax").c_str()), std::fabs(key.amax() - amax) / amax, 1e-5);
    expectTransposedCopy(tag(dt, (what + shape).c_str()), got, codes_t, M, C, key, scale);
  };
  {
    auto x = rounded(randomVector(M * C, rng, 2.f), dt), w = rounded(randomVector(C, rng, 0.5f), dt),
         b = rounded(randomVector(C, rng, 0.2f), dt);
    std::vector<float> y(static_cast<size_t>(M * C)), mean(static_cast<size_t>(M)), rstd(static_cast<size_t>(M));
    cpu::layernormForward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
    Dev gx(dt, x.size()), gw(dt, w.size()), gb(dt, b.size()), gm(DType::F32, size_t(M)), gr(DType::F32, size_t(M));
    gx.upload(x), gw.upload(w), gb.upload(b);
    check("layernorm forward FP8 both layouts", y, Fp8Format::E4M3,
          [&](uint8_t* codes, uint8_t* codes_t, const cuda::Fp8Write& wr) {
            cuda::layernormForwardFp8(codes, codes_t, gm.p, gm.dt, gr.p, gr.dt, gx.p, gw.p, gb.p, M, C, dt, wr, nullptr);
          });
    expectBelow(tag(dt, ("layernorm forward FP8 mean" + shape).c_str()), relError(gm.download(), mean), 1e-4);
    expectBelow(tag(dt, ("layernorm forward FP8 rstd" + shape).c_str()), relError(gr.download(), rstd), 1e-5);
  }
  auto x = rounded(randomVector(M * C, rng, 2.f), dt), dy = rounded(randomVector(M * C, rng), dt);
  std::vector<float> y(x.size()), dx(x.size());
  cpu::geluForward<float>(y.data(), x.data(), M * C);
  cpu::geluBackward<float>(dx.data(), dy.data(), x.data(), M * C, false);
  Dev gx(dt, x.size()), gdy(dt, dy.size());
  gx.upload(x), gdy.upload(dy);
  check("gelu forward FP8 both layouts", y, Fp8Format::E4M3,
        [&](uint8_t* codes, uint8_t* codes_t, const cuda::Fp8Write& wr) {
          cuda::geluForwardFp8(codes, codes_t, gx.p, M, C, dt, wr, nullptr);
        });
  check("gelu backward FP8 both layouts", dx, Fp8Format::E5M2,
        [&](uint8_t* codes, uint8_t* codes_t, const cuda::Fp8Write& wr) {
          cuda::geluBackwardFp8(codes, codes_t, gdy.p, gx.p, M, C, dt, wr, nullptr);
        });
  // Without the transposed copy there is no kernel: a clear error.
  bool threw = false;
  try {
    DelayedKey key(Fp8Format::E4M3);
    DeviceBytes out(x.size());
    cuda::geluForwardFp8(out.bytes(), nullptr, gx.p, M, C, dt, key.write(), nullptr);
  } catch (const cuda::CudaError&) {
    threw = true;
  }
  expectTrue(tag(dt, ("gelu forward FP8 without its transposed copy is refused" + shape).c_str()), threw);
}

// The end of a step: the key's amax into its history, the next scale from
// the history's largest as the CPU reference's Fp8Scales takes it, over
// more steps than the history holds (the oldest amax leaves it).
void testFp8DelayedHistory() {
  DelayedKey key(Fp8Format::E4M3);
  key.setScale(1.0f);
  const int steps = kFp8History + 3;
  auto amaxOf = [](int step) { return step == 0 ? 1000.0f : step == 5 ? 0.0f : 1.0f + float(step % 7); };
  Fp8History cpu;  // the reference's bookkeeping, by hand: key "k"
  float cpu_scale = 1.0f;
  int mismatches = 0;
  for (int step = 0; step < steps; ++step) {
    const float a = amaxOf(step);
    cudaMemcpy(key.state.amax, &a, 4, cudaMemcpyHostToDevice);
    cuda::fp8DelayedEndStep(key.state, nullptr);
    std::deque<float>& h = cpu.amax["k"];
    h.push_back(a);
    if (int(h.size()) > kFp8History) h.pop_front();
    cpu_scale = fp8Scale(*std::max_element(h.begin(), h.end()), Fp8Format::E4M3, cpu_scale);
    mismatches += key.get(key.state.scale) != cpu_scale;
  }
  int count = 0;
  cudaMemcpy(&count, key.state.count, 4, cudaMemcpyDeviceToHost);
  expectTrue(fmt::format("delayed scaling history over {} steps: {} scales differ from the CPU's (last {} vs {}), "
                         "{} steps counted, amax reset to {}",
                         steps, mismatches, key.get(key.state.scale), cpu_scale, count, key.amax()),
             mismatches == 0 && count == steps && key.amax() == 0.0f && cpu_scale == 448.0f / 7.0f);
}

void testTransposeBytes(int64_t rows, int64_t cols) {
  std::vector<uint8_t> in(size_t(rows * cols)), out(in.size());
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : in) b = uint8_t(byte(rng));
  uint8_t *gi = nullptr, *go = nullptr;
  cudaMalloc(&gi, in.size());
  cudaMalloc(&go, in.size());
  cudaMemcpy(gi, in.data(), in.size(), cudaMemcpyHostToDevice);
  cuda::transposeBytes(go, gi, rows, cols, nullptr);
  cudaMemcpy(out.data(), go, out.size(), cudaMemcpyDeviceToHost);
  cudaFree(gi);
  cudaFree(go);
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) wrong += out[size_t(c * rows + r)] != in[size_t(r * cols + c)];
  expectTrue(fmt::format("FP8 byte transpose {} x {}: {} bytes misplaced", rows, cols, wrong), wrong == 0);
}

// A linear layer's three FP8 GEMMs as the executor runs them (casts with
// current scaling, the backward's operands transposed, cuBLASLt's FP8 GEMMs
// with per-tensor scales, bf16 out) against the CPU reference's emulation on
// the same inputs: the same codes, so only the accumulation order and the
// bf16 output rounding differ. FP8 itself moves these products by several
// percent (checked too), so a wrong scale, format or transpose cannot pass.
struct Fp8Dev {
  uint8_t* codes = nullptr;
  float* scale_inv = nullptr;
  std::vector<float> decoded;  // the CPU's view: code value / scale
  Fp8Dev(const std::vector<float>& x, DType dt, Fp8Format f) {
    Dev in(dt, x.size());
    in.upload(x);
    cudaMalloc(&codes, x.size());
    cudaMalloc(&scale_inv, 256);
    cuda::fp8CastCurrentScaling(codes, in.p, dt, int64_t(x.size()), f, scale_inv,
                                scratchBuffer(size_t(gpu_footprint::kFp8AmaxBlocks) * 4), false, nullptr);
    cudaDeviceSynchronize();
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float scale = fp8Scale(amax, f);
    for (float v : x) decoded.push_back(fp8ToFloat(fp8FromFloat(v * scale, f), f) / scale);
  }
  ~Fp8Dev() {
    cudaFree(codes);
    cudaFree(scale_inv);
  }
  cuda::Gemm::Fp8Operand operand(Fp8Format f, const uint8_t* at = nullptr) const {
    return {at ? at : codes, f, scale_inv};
  }
};

// C[m, n] = sum_k A(m, k) B(k, n) in double.
template <class A, class B>
std::vector<float> product(int64_t m, int64_t n, int64_t k, A a, B b) {
  std::vector<float> c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(a(i, p)) * b(p, j);
      c[size_t(i * n + j)] = float(s);
    }
  return c;
}

void testFp8Gemms(int64_t M, int64_t N, int64_t K) {
  const DType dt = DType::BF16;
  const auto x = rounded(randomVector(size_t(M * K), rng), dt), w = rounded(randomVector(size_t(N * K), rng, 0.05f), dt),
             dy = rounded(randomVector(size_t(M * N), rng, 1e-3f), dt);
  const Fp8Dev qx(x, dt, Fp8Format::E4M3), qw(w, dt, Fp8Format::E4M3), qdy(dy, dt, Fp8Format::E5M2);
  const auto& X = qx.decoded;
  const auto& Wd = qw.decoded;
  const auto& D = qdy.decoded;
  const auto y_ref = product(M, N, K, [&](int64_t i, int64_t p) { return X[size_t(i * K + p)]; },
                             [&](int64_t p, int64_t j) { return Wd[size_t(j * K + p)]; });
  const auto dx_ref = product(M, K, N, [&](int64_t i, int64_t p) { return D[size_t(i * N + p)]; },
                              [&](int64_t p, int64_t j) { return Wd[size_t(p * K + j)]; });
  const auto dw_ref = product(N, K, M, [&](int64_t i, int64_t p) { return D[size_t(p * N + i)]; },
                              [&](int64_t p, int64_t j) { return X[size_t(p * K + j)]; });
  // The same products of the bf16 inputs: how far FP8 itself moves them.
  const auto y_bf16 = product(M, N, K, [&](int64_t i, int64_t p) { return x[size_t(i * K + p)]; },
                              [&](int64_t p, int64_t j) { return w[size_t(j * K + p)]; });
  void* ws = nullptr;
  cudaMalloc(&ws, cuda::Gemm::kWorkspaceBytes);
  cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
  uint8_t *wt = nullptr, *dyt = nullptr, *xt = nullptr;
  cudaMalloc(&wt, size_t(N * K));
  cudaMalloc(&dyt, size_t(M * N));
  cudaMalloc(&xt, size_t(M * K));
  cuda::transposeBytes(wt, qw.codes, N, K, nullptr);
  cuda::transposeBytes(dyt, qdy.codes, M, N, nullptr);
  cuda::transposeBytes(xt, qx.codes, M, K, nullptr);
  Dev y(dt, size_t(M * N)), dx(dt, size_t(M * K)), dw(dt, size_t(N * K));
  gemm.forwardFp8(y.p, qx.operand(Fp8Format::E4M3), qw.operand(Fp8Format::E4M3), nullptr, nullptr, M, N, K, dt,
                  nullptr);
  gemm.backwardDataFp8(dx.p, qdy.operand(Fp8Format::E5M2), qw.operand(Fp8Format::E4M3, wt), M, N, K, false, dt,
                       nullptr);
  gemm.backwardWeightFp8(dw.p, qdy.operand(Fp8Format::E5M2, dyt), qx.operand(Fp8Format::E4M3, xt), M, N, K, false, dt,
                         nullptr);
  const std::string shape = fmt::format(" M{} N{} K{}", M, N, K);
  const double fp8_effect = relError(y_ref, y_bf16);
  expectBelow(("FP8 forward GEMM against the CPU's emulated FP8" + shape).c_str(), relError(y.download(), y_ref), 1e-2);
  expectBelow(("FP8 data-gradient GEMM against the CPU's emulated FP8" + shape).c_str(), relError(dx.download(), dx_ref),
              1e-2);
  expectBelow(("FP8 weight-gradient GEMM against the CPU's emulated FP8" + shape).c_str(),
              relError(dw.download(), dw_ref), 1e-2);
  expectTrue(fmt::format("FP8 itself moves the forward product by {:.3e} (well above the 1e-2 above)", fp8_effect),
             fp8_effect > 1.5e-2);
  cudaFree(wt);
  cudaFree(dyt);
  cudaFree(xt);
  cudaFree(ws);
}

// Every tiled FP8 writer under the process's TANDEM_FP8_TILE and
// TANDEM_FP8_WRITER, with edges inside both dimensions; with many_tiles
// also shapes of more tiles than an H100 or H200 holds blocks at once (a
// looping block writes several, its prefetched loads meeting the next tile).
void testTiledWriters(bool many_tiles) {
  testFp8CastDelayed(DType::BF16, 516, 1032, Fp8Format::E5M2);
  testFp8CastTranspose(DType::F32, 260, 264, Fp8Format::E4M3);
  testFp8Writers(DType::BF16, 1000, 2048, 688);
  testFp8Writers(DType::BF16, 260, 64, 1032);
  testFp8Writers(DType::BF16, 132, 520, 200);
  testFp8WritersGpt2(260, 136);
  if (!many_tiles) return;
  testFp8CastDelayed(DType::BF16, 4096, 2048, Fp8Format::E4M3);
  testFp8CastDelayed(DType::F32, 260, 264, Fp8Format::E5M2);
  testFp8Writers(DType::BF16, 4096, 2048, 1032);
  testFp8WritersGpt2(4096, 1024);
}

int main() {
  requireGpus(1);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    testFp8Cast(DType::BF16, 1 << 20, f, 1.0f);      // 16-byte path, many blocks
    testFp8Cast(DType::BF16, 100003, f, 1e-3f);      // scalar path, small values (subnormal codes)
    testFp8Cast(DType::F32, 65536, f, 300.0f);
  }
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    testFp8CastTranspose(DType::BF16, 4096, 2048, f);
    testFp8CastTranspose(DType::BF16, 516, 1032, f);  // tile edges inside both dimensions
    testFp8CastTranspose(DType::F32, 260, 264, f);
  }
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    testFp8CastDelayed(DType::BF16, 4096, 2048, f);
    testFp8CastDelayed(DType::BF16, 516, 1032, f);
    testFp8CastDelayed(DType::F32, 260, 264, f);
  }
  // The writers' other tile shapes (TANDEM_FP8_TILE, a benchmark's choice)
  // and resident blocks walking the tiles (TANDEM_FP8_WRITER=loop).
  for (const char* walk : {"tiles", "loop"}) {
    setenv("TANDEM_FP8_WRITER", walk, 1);
    for (const char* tile : {"64x64", "32x128", "128x64"}) {
      if (std::string(walk) == "tiles" && std::string(tile) == "64x64") continue;  // the default, checked above
      setenv("TANDEM_FP8_TILE", tile, 1);
      std::printf("walk %s, tile %s\n", walk, tile);
      testTiledWriters(std::string(walk) == "loop");
    }
  }
  unsetenv("TANDEM_FP8_WRITER");
  unsetenv("TANDEM_FP8_TILE");
  // RMSNorm's one-kernel writer in 32-row blocks (TANDEM_RMSNORM_FP8=blocks),
  // a block with fewer rows at the end (260, 1000) and rows of three vectors
  // per lane on some lanes only (5120).
  setenv("TANDEM_RMSNORM_FP8", "blocks", 1);
  std::printf("rmsnorm FP8 in 32-row blocks\n");
  testFp8Writers(DType::BF16, 1000, 2048, 688);
  testFp8Writers(DType::BF16, 260, 64, 1032);
  testFp8Writers(DType::BF16, 96, 5120, 688);
  // Its one-read writer with the rows in shared memory (=smem): widths up
  // to 2048, one narrower than a warp's vectors (64), and shapes it leaves
  // to the two passes (rows not a multiple of 16, rows wider than 2048).
  setenv("TANDEM_RMSNORM_FP8", "smem", 1);
  std::printf("rmsnorm FP8 with the rows in shared memory\n");
  testFp8Writers(DType::BF16, 4096, 2048, 688);
  testFp8Writers(DType::BF16, 1008, 1288, 200);
  testFp8Writers(DType::BF16, 272, 64, 1032);
  testFp8Writers(DType::BF16, 260, 2048, 64);
  testFp8Writers(DType::BF16, 96, 5120, 688);
  unsetenv("TANDEM_RMSNORM_FP8");
  testFp8DelayedHistory();
  testFp8WritersGpt2(1024, 768);  // GPT-2 124M's width (its MLP's 3072 in the GELUs of the executor test)
  testFp8WritersGpt2(4096, 1024);  // GPT-2 350M's, 4096 rows (as the looping walks take it above)
  testFp8WritersGpt2(260, 136);   // tile edges inside both dimensions
  testTransposeBytes(512, 176);   // a tile edge inside both dimensions
  testTransposeBytes(4096, 2048);
  testTransposeBytes(68, 1028);
  testFp8Gemms(512, 384, 256);
  testFp8Gemms(1024, 176, 64);  // the tiny Llama's MLP
  cuda::prepareKernels();
  for (DType dt : {DType::F32, DType::BF16}) {
    // bf16: rows of whole 16-byte vectors held in a warp's registers (C =
    // 256 kV, kV <= 4) or streamed, wider ones (up to 8192) in a block's;
    // the scalar kernel otherwise (and in fp32).
    testRmsnorm(dt, 300, 100);    // scalar rows (C % 8 != 0)
    testRmsnorm(dt, 300, 96);     // streamed
    testRmsnorm(dt, 500, 256);    // one vector per lane
    testRmsnorm(dt, 2500, 768);   // three (Llama 124M)
    testRmsnorm(dt, 333, 1024);   // four (the weight gradient's sums in shared memory)
    testRmsnorm(dt, 2600, 2048);  // eight: the 1.1B Llama's width
    testRmsnorm(dt, 257, 1000);   // streamed, the last vectors on some lanes only
    testRmsnorm(dt, 300, 1536);   // a block per row, some threads without a vector
    testRmsnorm(dt, 700, 4096);   // Llama 2 7B's width: two vectors per thread
    testRmsnorm(dt, 64, 5120);    // three, the last on some threads only
    testRmsnorm(dt, 300, 2560);   // backward in a block per row too, the second vector on some threads
    testRmsnorm(dt, 130, 8192);   // Llama 2 70B's width: four per thread
    testRmsnorm(dt, 100, 8200);   // wider than the block holds: streamed
    testRmsnorm(dt, 3, 4096);     // fewer rows than the backward's blocks
    testSwiglu(dt, 300, 172);     // scalar path (F % 8 != 0)
    testSwiglu(dt, 1000, 688);    // 16-byte path in bf16
    testSwigluAmax(dt, 1000, 688);  // bf16: the 16-byte path; fp32: the scalar one
    testFp8Writers(dt, 1000, 2048, 688);  // bf16: the 16-byte paths and tiles; fp32: the scalar ones
    testFp8Writers(dt, 300, 100, 172);    // scalar paths in both (transposed after)
    testFp8Writers(dt, 260, 64, 1032);    // tile edges inside both dimensions
    testFp8Writers(dt, 96, 5120, 688);    // RMSNorm's block per row with three vectors, the last on some threads
    // Head width 16 and 32: the CUDA-core attention; 64: tensor cores in bf16.
    testGroupedAttention(dt, 2, 100, 64, 4, 2, false);
    testGroupedAttention(dt, 2, 33, 128, 4, 1, true);   // one key/value head (multi-query)
    testGroupedAttention(dt, 1, 130, 256, 4, 4, false);  // as many key/value heads as query heads
    testGroupedAttention(dt, 1, 300, 512, 8, 2, false);  // head width 64, five tiles
    testGroupedAttention(dt, 2, 1024, 256, 4, 2, true);  // long sequence: angles up to 1023 radians
  }
  // Heads 128 wide (Llama 2 and 3): bf16 on the tensor cores' wgmma code.
  if (cuda::attentionRunsHere(1024, 8, DType::BF16)) {
    testGroupedAttention(DType::BF16, 1, 300, 1024, 8, 2, false);  // 4 query heads per key/value head
    testGroupedAttention(DType::BF16, 2, 256, 512, 4, 4, true);   // as many key/value heads as query heads
    testGroupedAttention(DType::BF16, 1, 2048, 256, 2, 1, false);  // one key/value head, angles up to 2047 radians
  } else {
    std::printf("SKIP grouped attention with heads 128 wide (no wgmma on this GPU)\n");
  }
  // Its backward writing FP8: heads 64 wide in groups of 4 (the 1.1B
  // Llama's), a partial last tile, one key/value head per query head, a
  // sequence the transposed words cannot take; 128 wide on wgmma.
  testGroupedAttentionFp8(2, 256, 512, 8, 2);
  testGroupedAttentionFp8(2, 100, 256, 4, 1);
  testGroupedAttentionFp8(1, 192, 256, 4, 4);
  testGroupedAttentionFp8(1, 102, 256, 4, 2);
  if (cuda::attentionRunsHere(1024, 8, DType::BF16)) {
    testGroupedAttentionFp8(1, 300, 1024, 8, 2);
    testGroupedAttentionFp8(2, 128, 512, 4, 4);
  }
  // The grouped layout read in place on the other instruction path too
  // (mma.sync and cp.async, heads 64 wide): the layout's columns, the
  // group's dK and dV summed in registers, dQ and dK rotated back as stored.
  setenv("TANDEM_ATTN_MMA", "sync", 1);
  cuda::prepareKernels();
  testGroupedAttention(DType::BF16, 1, 300, 512, 8, 2, false);
  testGroupedAttention(DType::BF16, 2, 200, 256, 4, 1, true);
  testGroupedAttention(DType::BF16, 1, 130, 256, 4, 4, false);
  testGroupedAttentionFp8(2, 100, 256, 4, 1);
  unsetenv("TANDEM_ATTN_MMA");
  cuda::prepareKernels();
  testDeterministic();
  const cudaError_t err = cudaDeviceSynchronize();
  expectTrue(std::string("no CUDA error: ") + cudaGetErrorString(err), err == cudaSuccess);
  return finish();
}
