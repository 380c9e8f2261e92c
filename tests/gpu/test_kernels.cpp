// Every CUDA kernel against the CPU reference kernels (engine/cpu/kernels.h)
// on fresh random inputs, in fp32 and bf16. bf16 inputs are rounded on the
// host first so both sides see the same values; outputs are compared by
// ||gpu - cpu|| / ||cpu||.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <numeric>
#include <tuple>

#include "engine/cpu/kernels.h"
#include "engine/cuda/check.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/gemm_gelu.h"
#include "engine/cuda/graph_memsets.h"
#include "engine/cuda/kernels.h"
#include "engine/numerics/bf16.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/kernel_test_util.h"

using namespace tandem;
using namespace tandem::gputest;

namespace {

void testLayernorm(DType dt, int64_t M, int64_t C) {
  auto x = rounded(randomVector(M * C, rng), dt), w = rounded(randomVector(C, rng), dt),
       b = rounded(randomVector(C, rng), dt), dy = rounded(randomVector(M * C, rng), dt),
       dx0 = rounded(randomVector(M * C, rng), dt);
  std::vector<float> y(M * C), mean(M), rstd(M);
  cpu::layernormForward<float>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
  Dev gx(dt, M * C), gw(dt, C), gb(dt, C), gy(dt, M * C), gm(DType::F32, M), gr(DType::F32, M);
  gx.upload(x), gw.upload(w), gb.upload(b);
  cuda::layernormForward(gy.p, gm.p, gm.dt, gr.p, gr.dt, gx.p, gw.p, gb.p, M, C, dt, nullptr);
  const std::string shape = fmt::format(" M{} C{}", M, C);
  expectBelow(tag(dt, ("layernorm forward y" + shape).c_str()), relError(gy.download(), y), tol(dt));
  expectBelow(tag(dt, ("layernorm forward rstd" + shape).c_str()), relError(gr.download(), rstd), 1e-5);
  // Backward from the reference statistics, dx accumulating into dx0.
  std::vector<float> dx = dx0, dw(C), db(C);
  cpu::layernormBackward<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), M, C, true, false);
  Dev gdy(dt, M * C), gdx(dt, M * C), gdw(dt, C), gdb(dt, C), gm2(DType::F32, M), gr2(DType::F32, M);
  gdy.upload(dy), gdx.upload(dx0), gm2.upload(mean), gr2.upload(rstd);
  cuda::layernormBackward(gdx.p, gdw.p, gdb.p, nullptr, gdy.p, gx.p, gw.p, gm2.p, DType::F32, gr2.p, DType::F32, M,
                          C, true, false, dt, scratchBuffer(cuda::layernormScratchBytes(C)), nullptr);
  expectBelow(tag(dt, ("layernorm backward dx (accumulate)" + shape).c_str()), relError(gdx.download(), dx), tol(dt));
  expectBelow(tag(dt, ("layernorm backward dw" + shape).c_str()), relError(gdw.download(), dw), tol(dt));
  expectBelow(tag(dt, ("layernorm backward db" + shape).c_str()), relError(gdb.download(), db), tol(dt));
  // The same backward also summing the residual gradient it adds to (a
  // linear layer's bias gradient, engine/passes/bias_grad.h): the column sums
  // of dx0, the other outputs unchanged.
  std::vector<float> bias(C);
  cpu::columnSums<float>(bias.data(), dx0.data(), M, C, false);
  Dev gbias(dt, C);
  gdx.upload(dx0);
  cuda::layernormBackward(gdx.p, gdw.p, gdb.p, gbias.p, gdy.p, gx.p, gw.p, gm2.p, DType::F32, gr2.p, DType::F32, M,
                          C, true, false, dt, scratchBuffer(cuda::layernormScratchBytes(C, true)), nullptr);
  expectBelow(tag(dt, ("layernorm backward + bias gradient: bias" + shape).c_str()), relError(gbias.download(), bias),
              tol(dt));
  expectBelow(tag(dt, ("layernorm backward + bias gradient: dx" + shape).c_str()), relError(gdx.download(), dx),
              tol(dt));
  expectBelow(tag(dt, ("layernorm backward + bias gradient: dw, db" + shape).c_str()),
              std::max(relError(gdw.download(), dw), relError(gdb.download(), db)), tol(dt));
}

// The residual add and the layernorm after it in one kernel (the plan's
// add+layernorm fusion) against the two kernels: the same bytes, sum and
// layernorm outputs alike, on the vector, the block-per-row and the scalar
// paths.
void testAddLayernorm(DType dt, int64_t M, int64_t C) {
  auto a = rounded(randomVector(M * C, rng), dt), a2 = rounded(randomVector(M * C, rng), dt),
       w = rounded(randomVector(C, rng), dt), b = rounded(randomVector(C, rng), dt);
  Dev ga(dt, M * C), ga2(dt, M * C), gw(dt, C), gb(dt, C);
  ga.upload(a), ga2.upload(a2), gw.upload(w), gb.upload(b);
  Dev sum1(dt, M * C), y1(dt, M * C), m1(DType::F32, M), r1(DType::F32, M);
  cuda::addForward(sum1.p, ga.p, ga2.p, M * C, dt, nullptr);
  cuda::layernormForward(y1.p, m1.p, m1.dt, r1.p, r1.dt, sum1.p, gw.p, gb.p, M, C, dt, nullptr);
  Dev sum2(dt, M * C), y2(dt, M * C), m2(DType::F32, M), r2(DType::F32, M);
  cuda::addLayernormForward(sum2.p, y2.p, m2.p, m2.dt, r2.p, r2.dt, ga.p, ga2.p, gw.p, gb.p, M, C, dt, nullptr);
  const std::string shape = fmt::format(" M{} C{}", M, C);
  expectTrue(tag(dt, ("add+layernorm: the sum bit for bit" + shape).c_str()), sum2.download() == sum1.download());
  expectTrue(tag(dt, ("add+layernorm: y bit for bit" + shape).c_str()), y2.download() == y1.download());
  expectTrue(tag(dt, ("add+layernorm: mean and rstd bit for bit" + shape).c_str()),
             m2.download() == m1.download() && r2.download() == r1.download());
}

void testAttention(DType dt, int64_t B, int64_t T, int64_t C, int64_t H, bool accumulate = false) {
  auto qkv = rounded(randomVector(B * T * 3 * C, rng), dt), dout = rounded(randomVector(B * T * C, rng), dt);
  std::vector<float> out(B * T * C), lse(B * H * T), dqkv(B * T * 3 * C, 0.f);
  cpu::attentionForward<float>(out.data(), lse.data(), qkv.data(), B, T, C, H);
  Dev gq(dt, qkv.size()), go(dt, out.size()), gl(DType::F32, lse.size()), gdo(dt, dout.size()), gdq(dt, qkv.size());
  gq.upload(qkv), gdo.upload(dout);
  cuda::attentionForward(go.p, gl.p, gl.dt, gq.p, B, T, C, H, dt, nullptr);
  const bool tensor_cores = dt == DType::BF16 && (C / H == 64 || C / H == 128);
  const std::string shape = fmt::format("B{} T{} C{} H{}{}{}", B, T, C, H, accumulate ? " (accumulate)" : "",
                                        tensor_cores ? fmt::format(" [{}]", cuda::attentionMmaPath()) : "");
  expectBelow(tag(dt, ("attention forward out " + shape).c_str()), relError(go.download(), out), tol(dt));
  expectBelow(tag(dt, ("attention forward lse " + shape).c_str()), relError(gl.download(), lse), 1e-5);
  // Backward on the reference forward results (out rounded as the GPU stores it).
  auto out_r = rounded(out, dt);
  if (accumulate) {
    dqkv = rounded(randomVector(B * T * 3 * C, rng), dt);
    gdq.upload(dqkv);
  }
  cpu::attentionBackward<float>(dqkv.data(), dout.data(), qkv.data(), out_r.data(), lse.data(), B, T, C, H,
                                accumulate);
  Dev go2(dt, out.size()), gl2(DType::F32, lse.size());
  go2.upload(out_r), gl2.upload(lse);
  // Without accumulation the QKV bias gradient is summed on the way
  // (engine/passes/bias_grad.h): the column sums of what was stored.
  Dev gbias(dt, 3 * C);
  cuda::attentionBackward(gdq.p, accumulate ? nullptr : gbias.p, gdo.p, gq.p, go2.p, gl2.p, DType::F32, B, T, C, H,
                          accumulate, false, dt, scratchBuffer(cuda::attentionScratchBytes(B, T, H, C, !accumulate)),
                          nullptr);
  const auto got = gdq.download();
  if (!accumulate) {
    std::vector<float> of_stored(3 * C), of_reference(3 * C);
    cpu::columnSums<float>(of_stored.data(), got.data(), B * T, 3 * C, false);
    cpu::columnSums<float>(of_reference.data(), dqkv.data(), B * T, 3 * C, false);
    const auto bias = gbias.download();
    // Sums of the same stored values, fp32 against double, then rounded to dt.
    expectBelow(tag(dt, ("attention backward bias gradient = sums of dqkv " + shape).c_str()),
                relError(bias, rounded(of_stored, dt)), dt == DType::BF16 ? 4e-3 : 1e-5);
    expectBelow(tag(dt, ("attention backward bias gradient against the reference " + shape).c_str()),
                relError(bias, of_reference), dt == DType::BF16 ? 1e-2 : 1e-4);
  }
  expectBelow(tag(dt, ("attention backward dqkv " + shape).c_str()), relError(got, dqkv),
              dt == DType::BF16 ? 1e-2 : 1e-4);
  // Each third of a row (dq | dk | dv) on its own, so a small part cannot
  // hide. A part that is zero up to rounding (dq and dk with a single token)
  // is measured against the norm of the whole gradient instead.
  double all = 0;
  for (float x : dqkv) all += double(x) * x;
  all = std::sqrt(all);
  for (int part = 0; part < 3; ++part) {
    double num = 0, den = 0;
    for (int64_t row = 0; row < B * T; ++row)
      for (int64_t c = 0; c < C; ++c) {
        const double a = got[row * 3 * C + part * C + c], r = dqkv[row * 3 * C + part * C + c];
        num += (a - r) * (a - r);
        den += r * r;
      }
    const double err = std::sqrt(den) > 1e-3 * all ? std::sqrt(num / den) : std::sqrt(num) / std::max(all, 1e-30);
    expectBelow(tag(dt, fmt::format("attention backward {} {}", "qkv"[part], shape).c_str()), err,
                dt == DType::BF16 ? 1e-2 : 1e-4);
  }
}

// The same backward three times gives the same bits: every output element
// has one writer (no atomics), which graph == eager over many steps relies on.
void testAttentionDeterministic(int64_t B, int64_t T, int64_t C, int64_t H) {
  const DType dt = DType::BF16;
  auto qkv = rounded(randomVector(B * T * 3 * C, rng), dt), dout = rounded(randomVector(B * T * C, rng), dt);
  Dev gq(dt, qkv.size()), go(dt, B * T * C), gl(DType::F32, B * H * T), gdo(dt, dout.size()), gdq(dt, qkv.size()),
      gbias(dt, 3 * C);
  gq.upload(qkv), gdo.upload(dout);
  cuda::attentionForward(go.p, gl.p, gl.dt, gq.p, B, T, C, H, dt, nullptr);
  float* scratch = scratchBuffer(cuda::attentionScratchBytes(B, T, H, C, true));
  std::vector<float> first, first_bias;
  bool same = true;
  for (int run = 0; run < 3; ++run) {
    cuda::attentionBackward(gdq.p, gbias.p, gdo.p, gq.p, go.p, gl.p, DType::F32, B, T, C, H, false, false, dt,
                            scratch, nullptr);
    const auto got = gdq.download(), bias = gbias.download();
    if (run == 0) {
      first = got, first_bias = bias;
    } else {
      same = same && got == first && bias == first_bias;
    }
  }
  expectTrue(fmt::format("attention backward [{}] bit-identical over three runs, B{} T{} C{} H{}",
                         cuda::attentionMmaPath(), B, T, C, H),
             same);
  // Identical zeros would pass the check above: the gradient must be there.
  double norm = 0;
  for (float x : first) norm += double(x) * x;
  expectTrue(fmt::format("attention backward [{}] gradient not zero, B{} T{} C{} H{}", cuda::attentionMmaPath(), B, T,
                         C, H),
             norm > 0);
}

void testElementwise(DType dt, int64_t n) {
  auto x = rounded(randomVector(n, rng, 2.f), dt), dy = rounded(randomVector(n, rng), dt),
       z = rounded(randomVector(n, rng), dt);
  std::vector<float> y(n), dx = z, c(n);
  cpu::geluForward<float>(y.data(), x.data(), n);
  cpu::geluBackward<float>(dx.data(), dy.data(), x.data(), n, true);
  cpu::addForward<float>(c.data(), x.data(), dy.data(), n);
  Dev gx(dt, n), gy(dt, n), gdy(dt, n), gdx(dt, n), gc(dt, n);
  gx.upload(x), gdy.upload(dy), gdx.upload(z);
  cuda::geluForward(gy.p, gx.p, n, dt, nullptr);
  cuda::geluBackward(gdx.p, gdy.p, gx.p, n, true, dt, nullptr);
  cuda::addForward(gc.p, gx.p, gdy.p, n, dt, nullptr);
  const std::string sz = fmt::format(" n={}", n);
  expectBelow(tag(dt, ("gelu forward" + sz).c_str()), relError(gy.download(), y), tol(dt));
  expectBelow(tag(dt, ("gelu backward (accumulate)" + sz).c_str()), relError(gdx.download(), dx), tol(dt));
  expectBelow(tag(dt, ("add" + sz).c_str()), relError(gc.download(), c), tol(dt));
}

// dlogits is compared twice: whole, and without the target entries (the
// softmax part alone, which the -scale target entries would hide at large V).
// Without dlogits the logits must come back untouched; the loss sum of a
// second identical launch must be bit-identical.
void testCrossEntropy(DType dt, int64_t M, int64_t V, bool with_grad, DType loss_dt = DType::F32) {
  auto logits = rounded(randomVector(M * V, rng, 3.f), dt);
  std::vector<int32_t> targets(M);
  for (auto& t : targets) t = int32_t(rng() % V);
  std::vector<float> losses(M), dlogits(M * V);
  cpu::crossEntropyForward<float>(losses.data(), logits.data(), targets.data(), M, V);
  const double scale = 1.0 / double(M);
  cpu::crossEntropyBackward<float>(dlogits.data(), logits.data(), targets.data(), M, V, scale);
  Dev gl(dt, M * V), gloss(loss_dt, M), gsum(DType::F32, 1);
  gl.upload(logits);
  gsum.upload({0.f});
  int32_t* gt;
  cudaMalloc(&gt, M * 4);
  cudaMemcpy(gt, targets.data(), M * 4, cudaMemcpyHostToDevice);
  auto launch = [&] {
    cuda::crossEntropy(gloss.p, loss_dt, with_grad ? gl.p : nullptr, gl.p, gt, M, V, float(scale), dt,
                       static_cast<float*>(gsum.p), scratchBuffer(cuda::crossEntropyScratchBytes(M)), nullptr);
  };
  launch();
  const std::string sz = fmt::format(" M={} V={}{}", M, V, loss_dt == DType::BF16 ? " bf16 losses" : "");
  expectBelow(tag(dt, ("cross-entropy losses" + sz).c_str()), relError(gloss.download(), losses),
              loss_dt == DType::BF16 ? 4e-3 : 1e-5);
  const float sum1 = gsum.download()[0];
  const double ref_sum = std::accumulate(losses.begin(), losses.end(), 0.0);
  expectBelow(tag(dt, ("cross-entropy loss sum" + sz).c_str()), std::abs(sum1 - ref_sum) / ref_sum, 1e-5);
  if (with_grad) {
    auto got = gl.download();
    expectBelow(tag(dt, ("cross-entropy dlogits (in place)" + sz).c_str()), relError(got, dlogits), tol(dt));
    std::vector<float> got_t(M), ref_t(M);
    for (int64_t m = 0; m < M; ++m) {
      const int64_t i = m * V + targets[size_t(m)];
      got_t[size_t(m)] = got[size_t(i)];
      ref_t[size_t(m)] = dlogits[size_t(i)];
      got[size_t(i)] = dlogits[size_t(i)] = 0.f;
    }
    expectBelow(tag(dt, ("cross-entropy dlogits, softmax part" + sz).c_str()), relError(got, dlogits), tol(dt));
    expectBelow(tag(dt, ("cross-entropy dlogits, targets" + sz).c_str()), relError(got_t, ref_t), tol(dt));
  } else {
    expectTrue(tag(dt, ("cross-entropy without dlogits leaves the logits" + sz).c_str()), gl.download() == logits);
    gsum.upload({0.f});
    launch();
    const float sum2 = gsum.download()[0];
    expectTrue(tag(dt, ("cross-entropy loss sum repeats bit for bit" + sz).c_str()),
               std::memcmp(&sum1, &sum2, sizeof(float)) == 0);
  }
  // The streamed kernel (whole rows through shared memory) and the
  // one-row-per-block kernel: the same bits, losses and dlogits.
  if (cuda::crossEntropyStreams(V, dt)) {
    gl.upload(logits);
    gsum.upload({0.f});
    launch();
    const auto streamed_loss = gloss.download(), streamed_grad = gl.download();
    const float streamed_sum = gsum.download()[0];
    cuda::setCrossEntropyStreamed(false);
    gl.upload(logits);
    gsum.upload({0.f});
    launch();
    cuda::setCrossEntropyStreamed(true);
    const float rows_sum = gsum.download()[0];
    expectTrue(tag(dt, ("cross-entropy streamed == one row per block, bit for bit" + sz).c_str()),
               gloss.download() == streamed_loss && gl.download() == streamed_grad &&
                   std::memcmp(&streamed_sum, &rows_sum, sizeof(float)) == 0);
  } else if (dt == DType::BF16 && V % 8 == 0) {
    fmt::print("     (cross-entropy{}: the streamed kernel does not apply here)\n", sz);
  }
  cudaFree(gt);
}

// positions false: no position table (the Llama family), wpe and dwpe null.
void testEmbedding(DType dt, int64_t C, bool positions) {
  const int64_t B = 3, T = 17, V = 23;  // V small: many repeated tokens
  auto wte = rounded(randomVector(V * C, rng), dt), wpe = rounded(randomVector(T * C, rng), dt),
       dout = rounded(randomVector(B * T * C, rng), dt), dwte0 = rounded(randomVector(V * C, rng), dt);
  std::vector<int32_t> tokens(B * T);
  for (auto& t : tokens) t = int32_t(rng() % V);
  std::vector<float> out(B * T * C), dwte = dwte0, dwpe(T * C, 0.f);
  cpu::embeddingForward<float>(out.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr, B, T, C);
  cpu::embeddingBackward<float>(dwte.data(), positions ? dwpe.data() : nullptr, dout.data(), tokens.data(), B, T, C, V,
                                true);
  // Host-built token index, as the executor builds it at LoadBatch.
  const int64_t n = B * T;
  std::vector<int32_t> index(2 * n + 2);
  std::iota(index.begin(), index.begin() + n, 0);
  std::stable_sort(index.begin(), index.begin() + n, [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  int32_t segs = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || tokens[index[i]] != tokens[index[i - 1]]) index[n + segs++] = int32_t(i);
  index[n + segs] = int32_t(n);
  index[2 * n + 1] = segs;
  int32_t *gtok, *gidx;
  cudaMalloc(&gtok, n * 4);
  cudaMalloc(&gidx, index.size() * 4);
  cudaMemcpy(gtok, tokens.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(gidx, index.data(), index.size() * 4, cudaMemcpyHostToDevice);
  Dev gwte(dt, V * C), gwpe(dt, T * C), gout(dt, B * T * C), gdout(dt, B * T * C), gdwte(dt, V * C), gdwpe(dt, T * C);
  gwte.upload(wte), gwpe.upload(wpe), gdout.upload(dout), gdwte.upload(dwte0);
  cuda::embeddingForward(gout.p, gtok, gwte.p, positions ? gwpe.p : nullptr, B, T, C, dt, nullptr);
  cuda::TokenIndex ti{gidx, gidx + n, gidx + 2 * n + 1};
  cuda::embeddingBackward(gdwte.p, positions ? gdwpe.p : nullptr, gdout.p, gtok, ti, B, T, C, V, true, false, dt,
                          nullptr);
  const std::string what = fmt::format("embedding C{}{}", C, positions ? "" : " without positions");
  expectBelow(tag(dt, (what + " forward").c_str()), relError(gout.download(), out), tol(dt));
  expectBelow(tag(dt, (what + " backward dwte (accumulate)").c_str()), relError(gdwte.download(), dwte), tol(dt));
  if (positions)
    expectBelow(tag(dt, (what + " backward dwpe").c_str()), relError(gdwpe.download(), dwpe), tol(dt));
  else  // the row copied as it is: bit for bit
    expectTrue(tag(dt, (what + ": forward rows are the token rows, bit for bit").c_str()), gout.download() == out);
  cudaFree(gtok);
  cudaFree(gidx);
}

void testMatmul(DType dt, int64_t M, int64_t N, int64_t K) {
  auto x = rounded(randomVector(M * K, rng), dt), W = rounded(randomVector(N * K, rng), dt),
       bias = rounded(randomVector(N, rng), dt), dy = rounded(randomVector(M * N, rng), dt),
       dx0 = rounded(randomVector(M * K, rng), dt);
  std::vector<float> y(M * N), dx = dx0, dW(N * K), db(N);
  cpu::matmulForward<float>(y.data(), x.data(), W.data(), bias.data(), M, N, K);
  cpu::matmulBackwardData<float>(dx.data(), dy.data(), W.data(), M, N, K, true);
  cpu::matmulBackwardWeight<float>(dW.data(), db.data(), dy.data(), x.data(), M, N, K, false);
  void* ws;
  cudaMalloc(&ws, cuda::Gemm::kWorkspaceBytes);
  {
    cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
    Dev gx(dt, M * K), gW(dt, N * K), gb(dt, N), gy(dt, M * N), gdy(dt, M * N), gdx(dt, M * K), gdW(dt, N * K),
        gdb(dt, N);
    gx.upload(x), gW.upload(W), gb.upload(bias), gdy.upload(dy), gdx.upload(dx0);
    gemm.forward(gy.p, gx.p, gW.p, gb.p, M, N, K, dt, nullptr);
    gemm.backwardData(gdx.p, gdy.p, gW.p, M, N, K, true, dt, nullptr);
    gemm.backwardWeight(gdW.p, gdy.p, gx.p, M, N, K, false, dt, nullptr);
    cuda::biasGradient(gdb.p, gdy.p, M, N, false, dt, scratchBuffer(cuda::biasGradientScratchBytes(N)), nullptr);
    expectBelow(tag(dt, "matmul forward + bias epilogue"), relError(gy.download(), y), tol(dt));
    expectBelow(tag(dt, "matmul backward data (accumulate)"), relError(gdx.download(), dx), tol(dt));
    expectBelow(tag(dt, "matmul backward weight"), relError(gdW.download(), dW), tol(dt));
    expectBelow(tag(dt, fmt::format("matmul bias gradient M{} N{}", M, N).c_str()), relError(gdb.download(), db),
                tol(dt));
  }
  cudaFree(ws);
}

// GELU (tanh form) and its derivative in double, and the erf form for contrast.
double geluTanhRef(double x) {
  double y;
  cpu::geluForward<double>(&y, &x, 1);
  return y;
}
double geluTanhGradRef(double x) {
  double one = 1, g;
  cpu::geluBackward<double>(&g, &one, &x, 1, false);
  return g;
}
double geluErfRef(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double geluErfGradRef(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
}

// Which GELU a fused result follows: the projection of (gpu - tanh form) on
// (erf form - tanh form). 0 means the tanh form (only rounding noise left),
// 1 the erf form. Meaningful in fp32, where the forms differ by far more
// than the rounding.
double towardErf(const std::vector<float>& gpu, const std::vector<double>& tanh_ref,
                 const std::vector<double>& erf_ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double d = erf_ref[i] - tanh_ref[i];
    num += (double(gpu[i]) - tanh_ref[i]) * d;
    den += d * d;
  }
  return den > 0 ? num / den : 0;
}

std::vector<float> toFloat(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// The cuBLASLt epilogue fusions of engine/cuda/fusion.h against the CPU
// kernels: GEMM + bias + GELU keeping the GELU input (forward), GEMM times
// GELU's derivative (data gradient), GEMM + bias gradient (weight gradient).
// bf16 must be supported; fp32 is reported when cuBLASLt refuses it (the
// executor then keeps the separate kernels).
void testGemmEpilogues(DType dt, int64_t M, int64_t N, int64_t K) {
  const std::string shape = fmt::format(" M{} N{} K{}", M, N, K);
  void* ws;
  cudaMalloc(&ws, cuda::Gemm::kWorkspaceBytes);
  {
    cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
    // Pre-activations spread over [-4, 4], where the GELU forms differ most.
    const float w_scale = 1.5f / std::sqrt(float(K));
    auto x = rounded(randomVector(M * K, rng), dt), W = rounded(randomVector(N * K, rng, w_scale), dt),
         bias = rounded(randomVector(N, rng, 0.5f), dt);
    for (const bool with_bias : {true, false}) {
      const std::string what = std::string(with_bias ? "gemm+bias+gelu epilogue" : "gemm+gelu epilogue") + shape;
      const bool ok = gemm.forwardGeluSupported(M, N, K, with_bias, dt);
      if (!ok) {
        if (dt == DType::BF16) expectTrue(tag(dt, (what + ": supported by cuBLASLt").c_str()), false);
        else fmt::print("note {}: not supported by cuBLASLt (the executor keeps the separate kernels)\n",
                        tag(dt, what.c_str()));
        continue;
      }
      std::vector<float> pre(M * N);
      cpu::matmulForward<float>(pre.data(), x.data(), W.data(), with_bias ? bias.data() : nullptr, M, N, K);
      Dev gx(dt, M * K), gW(dt, N * K), gb(dt, N), gy(dt, M * N), gpre(dt, M * N);
      gx.upload(x), gW.upload(W), gb.upload(bias);
      gemm.forwardGelu(gy.p, gpre.p, gx.p, gW.p, with_bias ? gb.p : nullptr, M, N, K, dt, nullptr);
      const std::vector<float> gpu_pre = gpre.download(), gpu_y = gy.download();
      // GELU of the GPU's own pre-activation (fp32: the accumulator itself).
      std::vector<double> yt(M * N), ye(M * N);
      for (int64_t i = 0; i < M * N; ++i) yt[i] = geluTanhRef(gpu_pre[i]), ye[i] = geluErfRef(gpu_pre[i]);
      expectBelow(tag(dt, (what + ": aux (GELU input)").c_str()), relError(gpu_pre, pre), tol(dt));
      expectBelow(tag(dt, (what + ": output vs tanh GELU").c_str()), relError(gpu_y, toFloat(yt)), tol(dt));
      if (dt == DType::F32) {
        const double toward = towardErf(gpu_y, yt, ye);
        fmt::print("     {}: error vs erf GELU {:.3e}, projection on (erf - tanh) {:.3f}\n", what,
                   relError(gpu_y, toFloat(ye)), toward);
        expectBelow(tag(dt, (what + ": is the tanh GELU, |projection on erf|").c_str()), std::abs(toward), 0.25);
      }
    }
    {
      const std::string what = "gemm*gelu' (DGELU) epilogue" + shape;
      if (!gemm.backwardDataGeluSupported(M, N, K, dt)) {
        if (dt == DType::BF16) expectTrue(tag(dt, (what + ": supported by cuBLASLt").c_str()), false);
        else fmt::print("note {}: not supported by cuBLASLt (the executor keeps the separate kernels)\n",
                        tag(dt, what.c_str()));
      } else {
        auto dy = rounded(randomVector(M * N, rng), dt), pre = rounded(randomVector(M * K, rng, 1.5f), dt);
        std::vector<float> dgemm(M * K);
        cpu::matmulBackwardData<float>(dgemm.data(), dy.data(), W.data(), M, N, K, false);
        std::vector<double> rt(M * K), re(M * K);
        for (int64_t i = 0; i < M * K; ++i)
          rt[i] = double(dgemm[i]) * geluTanhGradRef(pre[i]), re[i] = double(dgemm[i]) * geluErfGradRef(pre[i]);
        Dev gdy(dt, M * N), gW(dt, N * K), gpre(dt, M * K), gdx(dt, M * K);
        gdy.upload(dy), gW.upload(W), gpre.upload(pre);
        gemm.backwardDataGelu(gdx.p, gdy.p, gW.p, gpre.p, M, N, K, dt, nullptr);
        const std::vector<float> gpu_dx = gdx.download();
        expectBelow(tag(dt, (what + " vs tanh GELU'").c_str()), relError(gpu_dx, toFloat(rt)), tol(dt));
        if (dt == DType::F32) {
          const double toward = towardErf(gpu_dx, rt, re);
          fmt::print("     {}: error vs erf GELU' {:.3e}, projection on (erf - tanh) {:.3f}\n", what,
                     relError(gpu_dx, toFloat(re)), toward);
          expectBelow(tag(dt, (what + ": is the tanh GELU', |projection on erf|").c_str()), std::abs(toward), 0.25);
        }
      }
    }
    {
      const std::string what = "gemm+bias gradient (BGRADB) epilogue" + shape;
      if (!gemm.backwardWeightBiasSupported(M, N, K, dt)) {
        if (dt == DType::BF16) expectTrue(tag(dt, (what + ": supported by cuBLASLt").c_str()), false);
        else fmt::print("note {}: not supported by cuBLASLt (the executor keeps the separate kernels)\n",
                        tag(dt, what.c_str()));
      } else {
        auto dy = rounded(randomVector(M * N, rng), dt);
        std::vector<float> dW(N * K), db(N);
        cpu::matmulBackwardWeight<float>(dW.data(), db.data(), dy.data(), x.data(), M, N, K, false);
        Dev gdy(dt, M * N), gx(dt, M * K), gdW(dt, N * K), gdb(dt, N);
        gdy.upload(dy), gx.upload(x);
        gemm.backwardWeightBias(gdW.p, gdb.p, gdy.p, gx.p, M, N, K, dt, nullptr);
        expectBelow(tag(dt, (what + ": dW").c_str()), relError(gdW.download(), dW), tol(dt));
        expectBelow(tag(dt, (what + ": db").c_str()), relError(gdb.download(), db), tol(dt));
      }
    }
    const cudaError_t err = cudaDeviceSynchronize();
    expectTrue(tag(dt, ("gemm epilogues" + shape + ": no CUDA error: " + cudaGetErrorString(err)).c_str()),
               err == cudaSuccess);
  }
  cudaFree(ws);
}

// The GELU GEMMs of our own (gemm_gelu.cu) through the same checks as
// cuBLASLt's epilogues, forward and backward, on shapes that fit their
// tiles (GPT-2's fc and fc_proj among them).
void testOwnGeluGemm() {
  if (!cuda::ownGeluGemmLoaded()) {
    std::printf("SKIP own GELU GEMM: no sm_90a code for this device\n");
    return;
  }
  cuda::setGeluGemmPath(cuda::GeluGemmPath::Own);
  for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{256, 256, 256}, {512, 512, 256},
                                {1024, 3072, 768}, {384, 768, 3072}}) {
    expectTrue(fmt::format("own GELU GEMM takes M{} N{} K{} (forward) and M{} K{} N{} (backward)", M, N, K, M, K, N),
               cuda::useOwnGeluGemm(true, M, N, K, {}) && cuda::useOwnGeluGemm(false, M, K, N, {}));
    testGemmEpilogues(DType::BF16, M, N, K);
  }
  cuda::prepareKernels();  // back to the default path
  // A shape off the tiles stays with cuBLASLt.
  expectTrue("own GELU GEMM refuses 1000 rows and 64 columns",
             !cuda::ownGeluGemmFits(1000, 256, 128) && !cuda::ownGeluGemmFits(1024, 64, 128));
}

void testOptimizer() {
  const int64_t n1 = 40000, n2 = 999;  // several chunks, and a short tensor
  auto g1 = randomVector(n1, rng), g2 = randomVector(n2, rng), p1 = randomVector(n1, rng), p2 = randomVector(n2, rng);
  double ss = 0;
  for (float v : g1) ss += double(v) * v;
  for (float v : g2) ss += double(v) * v;
  const float norm = float(std::sqrt(ss)), clip = 1.f;
  const float scale = float(clip / (norm + 1e-6));
  std::vector<float> m1(n1, 0.1f), v1(n1, 0.2f), m2(n2, 0.f), v2(n2, 0.f);
  std::vector<float> rp1 = p1, rm1 = m1, rv1 = v1, rp2 = p2, rm2 = m2, rv2 = v2;
  const int step = 3;
  cpu::adamwStep(rp1.data(), rm1.data(), rv1.data(), g1.data(), n1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, scale);
  cpu::adamwStep(rp2.data(), rm2.data(), rv2.data(), g2.data(), n2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, step, scale);
  Dev gg1(DType::BF16, n1), gg2(DType::F32, n2), gp1(DType::F32, n1), gm1(DType::F32, n1), gv1(DType::F32, n1),
      gp2(DType::F32, n2), gm2(DType::F32, n2), gv2(DType::F32, n2), gbf(DType::BF16, n1), gnorm(DType::F32, 1);
  // Tensor 1 has a bf16 gradient and a bf16 forward copy; the reference sees the rounded gradient.
  auto g1r = rounded(g1, DType::BF16);
  gg1.upload(g1), gg2.upload(g2), gp1.upload(p1), gm1.upload(m1), gv1.upload(v1), gp2.upload(p2), gm2.upload(m2),
      gv2.upload(v2);
  double ssr = 0;
  for (float v : g1r) ssr += double(v) * v;
  for (float v : g2) ssr += double(v) * v;
  rp1 = p1, rm1 = m1, rv1 = v1;
  const float scale_r = float(clip / (float(std::sqrt(ssr)) + 1e-6));
  rp2 = p2, rm2 = m2, rv2 = v2;
  cpu::adamwStep(rp1.data(), rm1.data(), rv1.data(), g1r.data(), n1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, scale_r);
  cpu::adamwStep(rp2.data(), rm2.data(), rv2.data(), g2.data(), n2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, step, scale_r);
  std::vector<cuda::TensorSlot> slots(2);
  slots[0] = {gbf.p, static_cast<float*>(gp1.p), static_cast<float*>(gm1.p), static_cast<float*>(gv1.p), gg1.p, n1,
              0, 0.1f, 1, 1};
  slots[1] = {gp2.p, static_cast<float*>(gp2.p), static_cast<float*>(gm2.p), static_cast<float*>(gv2.p), gg2.p, n2,
              (n1 + cuda::kChunkElements - 1) / cuda::kChunkElements, 0.f, 0, 0};
  const int64_t chunks = slots[1].chunk_begin + 1;
  cuda::TensorSlot* gslots;
  cudaMalloc(&gslots, sizeof(cuda::TensorSlot) * 2);
  cudaMemcpy(gslots, slots.data(), sizeof(cuda::TensorSlot) * 2, cudaMemcpyHostToDevice);
  float* partials;
  cudaMalloc(&partials, chunks * 4);
  cuda::gradNorm(static_cast<float*>(gnorm.p), gslots, 2, chunks, partials, false, nullptr);
  expectBelow("grad norm (bf16 + f32 tensors)", std::abs(gnorm.download()[0] - std::sqrt(ssr)) / std::sqrt(ssr), 1e-5);
  // The update of a previous step (schedule.optimizer_beside_forward) reads
  // the scalars' prev_* and does nothing without one: first a launch with
  // prev_valid 0 (no change), then the update through the prev_* fields,
  // this step's own fields poisoned.
  cuda::StepScalars sc;
  sc.lr = -1.f;
  sc.bias_correction1 = sc.bias_correction2 = 0.5;
  sc.prev_lr = 1e-3f;
  sc.prev_bias_correction1 = 1.0 - std::pow(double(0.9f), step);
  sc.prev_bias_correction2 = 1.0 - std::pow(double(0.95f), step);
  sc.prev_valid = 0;
  cuda::StepScalars* gsc;
  cudaMalloc(&gsc, sizeof(sc));
  cudaMemcpy(gsc, &sc, sizeof(sc), cudaMemcpyHostToDevice);
  cuda::adamw(gslots, 2, chunks, gsc, /*previous=*/true, static_cast<float*>(gnorm.p), false, clip, 0.9f, 0.95f, 1e-8f,
              nullptr);
  expectTrue("adamw of a previous step without one changes nothing",
             gp1.download() == p1 && gm1.download() == m1 && gv2.download() == v2);
  sc.prev_valid = 1;
  cudaMemcpy(gsc, &sc, sizeof(sc), cudaMemcpyHostToDevice);
  cuda::adamw(gslots, 2, chunks, gsc, /*previous=*/true, static_cast<float*>(gnorm.p), false, clip, 0.9f, 0.95f, 1e-8f,
              nullptr);
  expectBelow("adamw master (bf16 grad, decay)", relError(gp1.download(), rp1), 1e-6);
  expectBelow("adamw m", relError(gm1.download(), rm1), 1e-6);
  expectBelow("adamw v", relError(gv1.download(), rv1), 1e-6);
  expectBelow("adamw bf16 copy", relError(gbf.download(), rounded(rp1, DType::BF16)), 1e-6);
  expectBelow("adamw fp32 tensor (no decay)", relError(gp2.download(), rp2), 1e-6);
  cudaFree(gslots);
  cudaFree(partials);
  cudaFree(gsc);
}

// A graph of 4-byte memset nodes over one 4 KiB allocation, for
// graph_memsets.h's checks.
struct MemsetGraph {
  unsigned char* mem = nullptr;
  cudaGraph_t g = nullptr;
  explicit MemsetGraph(int fill) {
    TANDEM_CUDA_CHECK(cudaMalloc(&mem, 4096));
    TANDEM_CUDA_CHECK(cudaMemset(mem, fill, 4096));
    TANDEM_CUDA_CHECK(cudaGraphCreate(&g, 0));
  }
  ~MemsetGraph() {
    cudaGraphDestroy(g);
    cudaFree(mem);
  }
  cudaGraphNode_t memset(size_t offset, unsigned value, const std::vector<cudaGraphNode_t>& deps) {
    cudaMemsetParams p{};
    p.dst = mem + offset;
    p.value = value;
    p.elementSize = 4;
    p.width = 1;
    p.height = 1;
    cudaGraphNode_t n = nullptr;
    TANDEM_CUDA_CHECK(cudaGraphAddMemsetNode(&n, g, deps.data(), deps.size(), &p));
    return n;
  }
  static std::vector<cudaGraphNode_t> deps(cudaGraphNode_t n) {
    size_t k = 0;
    TANDEM_CUDA_CHECK(cudaGraphNodeGetDependencies(n, nullptr, nullptr, &k));
    std::vector<cudaGraphNode_t> out(k);
    if (k) TANDEM_CUDA_CHECK(cudaGraphNodeGetDependencies(n, out.data(), nullptr, &k));
    return out;
  }
  static size_t dependents(cudaGraphNode_t n) {
    size_t k = 0;
    TANDEM_CUDA_CHECK(cudaGraphNodeGetDependentNodes(n, nullptr, nullptr, &k));
    return k;
  }
  // Instantiates the graph, disables `off`, replays it once and returns the
  // allocation's bytes.
  std::vector<unsigned char> replay(const std::vector<cudaGraphNode_t>& off = {}) {
    cudaGraphExec_t e = nullptr;
    TANDEM_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    cuda::disableNodes(e, off);
    TANDEM_CUDA_CHECK(cudaGraphLaunch(e, nullptr));
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    cudaGraphExecDestroy(e);
    std::vector<unsigned char> host(4096);
    TANDEM_CUDA_CHECK(cudaMemcpy(host.data(), mem, 4096, cudaMemcpyDeviceToHost));
    return host;
  }
};

uint32_t wordAt(const std::vector<unsigned char>& bytes, size_t offset) {
  uint32_t v = 0;
  std::memcpy(&v, &bytes[offset], 4);
  return v;
}

}  // namespace

// graph_memsets.h on a graph of memsets: a -> b -> c, where only b writes
// inside the region. b becomes a root, c keeps its order after a and now
// also depends on b, and a replay writes what the chain wrote.
void testHoistMemsets() {
  MemsetGraph m(0);
  const cudaGraphNode_t a = m.memset(0, 0x11111111u, {});
  const cudaGraphNode_t b = m.memset(2048, 0x22222222u, {a});
  const cudaGraphNode_t c = m.memset(16, 0x33333333u, {b});
  expectTrue("graph memsets: the graph holds 3", cuda::memsetNodesOf(m.g) == 3);
  expectTrue("graph memsets: one inside [2048, 4096) moved",
             cuda::hoistMemsetsInside(m.g, m.mem + 2048, m.mem + 4096) == 1);
  expectTrue("graph memsets: the moved one is a root", MemsetGraph::deps(b).empty());
  const std::vector<cudaGraphNode_t> dc = MemsetGraph::deps(c);
  expectTrue("graph memsets: its dependent follows its predecessor and it",
             dc.size() == 2 && std::count(dc.begin(), dc.end(), a) == 1 && std::count(dc.begin(), dc.end(), b) == 1);
  expectTrue("graph memsets: nothing outside the region moves",
             cuda::hoistMemsetsInside(m.g, m.mem + 2048, m.mem + 4096) == 0);
  const std::vector<unsigned char> out = m.replay();
  expectTrue("graph memsets: the replay writes all three",
             wordAt(out, 0) == 0x11111111u && wordAt(out, 2048) == 0x22222222u && wordAt(out, 16) == 0x33333333u);
}

// graph_memsets.h's merge and orderBeforeRoots on a chain of memsets
// a -> z1 -> c -> z2 -> d, where z1 and z2 write zeros inside the region:
// one memset of the whole region replaces them, runs before the graph's
// only root (a), and the chain keeps its order without them.
void testMergedMemsetsBeforeRoots() {
  MemsetGraph m(0xff);
  const cudaGraphNode_t a = m.memset(0, 0x11111111u, {});
  const cudaGraphNode_t z1 = m.memset(2048, 0, {a});
  const cudaGraphNode_t c = m.memset(16, 0x33333333u, {z1});
  const cudaGraphNode_t z2 = m.memset(3000, 0, {c});
  const cudaGraphNode_t d = m.memset(32, 0x44444444u, {z2});
  const cuda::MergedMemsets merged = cuda::mergeZeroMemsetsInside(m.g, m.mem + 2048, m.mem + 4096);
  expectTrue("merged memsets: two merged into one", merged.merged.size() == 2 && merged.whole != nullptr);
  expectTrue("merged memsets: before the one root", cuda::orderBeforeRoots(m.g, {merged.whole}, merged.merged) == 1);
  using G = MemsetGraph;
  const std::vector<cudaGraphNode_t> da = G::deps(a), dc = G::deps(c), dd = G::deps(d);
  expectTrue("merged memsets: the root follows the whole-range memset", da.size() == 1 && da[0] == merged.whole);
  expectTrue("merged memsets: the chain keeps its order, one dependency each",
             dc.size() == 1 && dc[0] == a && dd.size() == 1 && dd[0] == c);
  expectTrue("merged memsets: the merged nodes have no edges",
             G::deps(z1).empty() && G::deps(z2).empty() && G::dependents(z1) == 0 && G::dependents(z2) == 0);
  expectTrue("merged memsets: the whole-range memset precedes only the root",
             G::deps(merged.whole).empty() && G::dependents(merged.whole) == 1);
  const std::vector<unsigned char> out = m.replay(merged.merged);
  expectTrue("merged memsets: the replay writes the chain",
             wordAt(out, 0) == 0x11111111u && wordAt(out, 16) == 0x33333333u && wordAt(out, 32) == 0x44444444u);
  expectTrue("merged memsets: the replay zeroes the whole region",
             std::all_of(out.begin() + 2048, out.end(), [](unsigned char v) { return v == 0; }));
}

// The bf16 head-dimension-64 attention on both instruction paths: wgmma
// (sm_90a, the default where it runs) and mma.sync. On compute capability
// 9.0 the wgmma path must be there: the build targets it.
void testAttentionPaths() {
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const bool hopper = prop.major == 9 && prop.minor == 0;
  for (const char* path : {"wgmma", "sync"}) {
    setenv("TANDEM_ATTN_MMA", path, 1);
    try {
      cuda::prepareKernels();
    } catch (const std::exception& e) {
      expectTrue(fmt::format("attention path {} available on compute capability {}.{}: {}", path, prop.major,
                             prop.minor, e.what()),
                 !hopper);
      std::printf("SKIP attention on %s (compute capability %d.%d)\n", path, prop.major, prop.minor);
      continue;
    }
    testAttention(DType::BF16, 1, 130, 256, 4);
    testAttention(DType::BF16, 1, 300, 128, 2);
    testAttention(DType::BF16, 2, 1024, 768, 12);  // GPT-2's heads
    testAttention(DType::BF16, 3, 77, 128, 2, true);
    testAttention(DType::BF16, 2, 1, 128, 2);
    testAttention(DType::BF16, 8, 200, 768, 12);  // 96 sequences, a ragged last tile
    testAttentionDeterministic(4, 1024, 768, 12);
    testAttentionDeterministic(8, 512, 768, 12);
  }
  unsetenv("TANDEM_ATTN_MMA");
  cuda::prepareKernels();
}

// Heads 128 wide (Llama 2 and 3): the tensor-core kernels' wgmma code only,
// tiles of two swizzle atoms and two pipeline stages. Elsewhere (another
// architecture, or TANDEM_ATTN_MMA=sync) the shape is not run: the kernels
// say so instead of computing something else.
void testWideAttention() {
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const bool hopper = prop.major == 9 && prop.minor == 0;
  expectTrue(fmt::format("heads 128 wide run on compute capability {}.{} (bf16)", prop.major, prop.minor),
             cuda::attentionRunsHere(256, 2, DType::BF16) == hopper);
  expectTrue("heads 128 wide are not run in fp32", !cuda::attentionRunsHere(256, 2, DType::F32));
  expectTrue("heads 96 wide are not run", !cuda::attentionRunsHere(192, 2, DType::BF16));
  if (!hopper) {
    std::printf("SKIP attention with heads 128 wide (compute capability %d.%d: no wgmma)\n", prop.major, prop.minor);
    return;
  }
  testAttention(DType::BF16, 1, 130, 256, 2);   // two heads, a ragged third tile
  testAttention(DType::BF16, 2, 64, 128, 1);    // one full tile
  testAttention(DType::BF16, 2, 1024, 512, 4);  // sixteen tiles
  testAttention(DType::BF16, 3, 77, 256, 2, true);  // gradients accumulated
  testAttention(DType::BF16, 2, 1, 256, 2);     // a single token
  testAttention(DType::BF16, 1, 4096, 128, 1);  // Llama 2's sequence: 64 tiles
  testAttentionDeterministic(2, 1024, 512, 4);
  // The mma.sync path does not take them: the launch refuses in words.
  setenv("TANDEM_ATTN_MMA", "sync", 1);
  cuda::prepareKernels();
  expectTrue("heads 128 wide are not run on the mma.sync path", !cuda::attentionRunsHere(256, 2, DType::BF16));
  Dev gq(DType::BF16, 3 * 256), go(DType::BF16, 256), gl(DType::F32, 2);
  std::string refusal;
  try {
    cuda::attentionForward(go.p, gl.p, gl.dt, gq.p, 1, 1, 256, 2, DType::BF16, nullptr);
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  expectTrue("heads 128 wide on mma.sync: refused with a message (" + refusal + ")",
             refusal.find("128") != std::string::npos);
  unsetenv("TANDEM_ATTN_MMA");
  cuda::prepareKernels();
}

// The device record a real run writes into the trace store: every version
// known on a GPU machine (NVML's driver release too, where the driver
// library is there).
void testDeviceRecord() {
  const cuda::DeviceRecord r = cuda::deviceRecord(0);
  const std::string json = cuda::devicesJson(r);
  std::printf("     device record: %s\n", json.c_str());
  expectTrue("device record: name, memory and SMs", !r.name.empty() && r.memory_bytes > 0 && r.sm_count > 0);
  expectTrue("device record: compute capability", r.cc_major >= 7);
  expectTrue("device record: CUDA driver and runtime versions", r.cuda_driver >= 12000 && r.cuda_runtime >= 12000);
  expectTrue("device record: cuBLASLt and NCCL versions", r.cublaslt >= 120000 && r.nccl >= 21000);
  expectTrue("device record: the driver's release from NVML", !r.driver.empty());
}

int main() {
  requireGpus(1);
  testHoistMemsets();
  testMergedMemsetsBeforeRoots();
  testDeviceRecord();
  cuda::prepareKernels();
  testWideAttention();
  for (DType dt : {DType::F32, DType::BF16}) {
    // Vector paths (C multiple of the 16-byte vector) and the scalar ones;
    // M past the 2112 warps of the backward makes warps take several rows.
    testLayernorm(dt, 300, 96);
    testLayernorm(dt, 2500, 768);
    testLayernorm(dt, 16384, 768);  // GPT-2's rows: about 8 per warp of the fixed grid
    testLayernorm(dt, 700, 1000);
    testLayernorm(dt, 257, 1024);
    testLayernorm(dt, 2200, 1280);  // a block per row (bf16, from width 769), scalar kernel (fp32)
    testLayernorm(dt, 300, 2048);
    // bf16 rows wider than a warp holds: a block per row (one to four
    // vectors per thread, the last partly used), blocks taking several rows.
    testLayernorm(dt, 600, 2560);
    testLayernorm(dt, 1000, 4096);
    testLayernorm(dt, 300, 6144);
    testLayernorm(dt, 130, 8192);
    testAddLayernorm(dt, 2500, 768);  // vector path
    testAddLayernorm(dt, 300, 4096);  // a block per row (bf16)
    if (dt == DType::BF16) {
      // Narrow rows on the block-per-row kernels (bench_layernorm_bwd's
      // comparison): most threads of a block idle at 768.
      setenv("TANDEM_LAYERNORM", "wide", 1);
      testLayernorm(dt, 2500, 768);
      testLayernorm(dt, 300, 1600);
      testAddLayernorm(dt, 300, 1024);
      unsetenv("TANDEM_LAYERNORM");
    }
    testAddLayernorm(dt, 300, 1003);  // scalar path (rows not a whole number of 16-byte vectors)
    testAttention(dt, 2, 100, 64, 4);   // head dim 16, T not a tile multiple
    testAttention(dt, 1, 130, 256, 4);  // head dim 64
    testAttention(dt, 2, 33, 128, 4);   // head dim 32
    testAttention(dt, 1, 300, 128, 2);  // head dim 64, five tiles (tensor cores in bf16)
    testAttention(dt, 2, 1024, 256, 4);       // head dim 64, sixteen tiles
    testAttention(dt, 3, 77, 128, 2, true);   // ragged last tile, gradients accumulated
    testAttention(dt, 2, 1, 128, 2);          // a single token
    testAttention(dt, 1, 64, 64, 2, true);    // head dim 32, one full tile, accumulated
    testElementwise(dt, 10007);  // scalar path
    testElementwise(dt, 8192);   // 16-byte path in bf16
    testCrossEntropy(dt, 64, 1000, true);
    testCrossEntropy(dt, 64, 1001, true);  // V not a multiple of 8 (scalar kernel in bf16)
    testCrossEntropy(dt, 64, 50304, true);  // GPT-2 vocabulary
    testCrossEntropy(dt, 64, 50304, false, DType::BF16);
    testCrossEntropy(dt, 300, 50304, false);  // more rows than SMs
    testCrossEntropy(dt, 400, 50304, true);
    testCrossEntropy(dt, 16, 60000, true);  // bf16 rows too wide for two in shared memory: not streamed
    // Many rows per block in the streamed kernel (both buffers reused, the
    // barriers' phases flipping): GPT-2's rows, and short ones.
    testCrossEntropy(dt, 1000, 50304, true);
    testCrossEntropy(dt, 2003, 1024, false);
    testEmbedding(dt, 40, true);
    testEmbedding(dt, 40, false);
    testEmbedding(dt, 64, false);  // 16-byte rows: the vector kernel in bf16
    testMatmul(dt, 128, 96, 80);
    testMatmul(dt, 1000, 772, 64);  // bias gradient: N not a multiple of 8 (scalar path)
    // cuBLASLt's epilogues (the own kernel, the default for the forward on
    // Hopper, is checked by testOwnGeluGemm).
    cuda::setGeluGemmPath(cuda::GeluGemmPath::CublasLt);
    testGemmEpilogues(dt, 512, 256, 64);
    testGemmEpilogues(dt, 1000, 192, 96);  // M not a tile multiple
    cuda::prepareKernels();  // back to the default path
  }
  testOptimizer();
  testOwnGeluGemm();
  testAttentionPaths();
  const cudaError_t err = cudaDeviceSynchronize();
  expectTrue(std::string("no CUDA error: ") + cudaGetErrorString(err), err == cudaSuccess);
  return finish();
}
