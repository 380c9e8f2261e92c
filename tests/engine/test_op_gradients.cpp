// Every backward kernel against central finite differences, in double.
//
// For an op with output y = f(inputs) we take a fixed random projection R of
// the output and the scalar L = sum(y * R); the analytic gradient of L with
// respect to an input is the op's backward applied to dy = R. Each input
// element is perturbed by h = 1e-6 * max(1, |x|) in both directions and
//   numeric_i = (L(x + h e_i) - L(x - h e_i)) / (2h).
// The metric, per input tensor, is
//   error = max_i |analytic_i - numeric_i| / max(max_i |analytic_i|, max_i |numeric_i|, 1e-8)
// and must stay below 1e-6. Normalising by the tensor's largest gradient keeps
// the round-off of the differences (about 1e-9 absolute here) from dominating
// elements whose gradient is nearly zero. Each check also requires the
// gradient not to vanish, so a backward that returns zeros cannot pass.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"

using namespace tandem::cpu;

namespace {

using Vec = std::vector<double>;

constexpr double kMaxGradientError = 1e-6;

Vec randomVec(std::mt19937_64& rng, std::size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct GradientCheck {
  double error = 0;
  double max_abs_numeric = 0;
};

// Perturbs every element of `input` (restoring it afterwards) and compares the
// central differences of loss() with `analytic`.
GradientCheck checkGradient(Vec& input, const Vec& analytic, const std::function<double()>& loss) {
  REQUIRE(analytic.size() == input.size());
  Vec numeric(input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    const double saved = input[i];
    const double h = 1e-6 * std::max(1.0, std::fabs(saved));
    input[i] = saved + h;
    const double plus = loss();
    input[i] = saved - h;
    const double minus = loss();
    input[i] = saved;
    numeric[i] = (plus - minus) / (2 * h);
  }
  double max_diff = 0, max_a = 0, max_n = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(analytic[i] - numeric[i]));
    max_a = std::max(max_a, std::fabs(analytic[i]));
    max_n = std::max(max_n, std::fabs(numeric[i]));
  }
  return {max_diff / std::max({max_a, max_n, 1e-8}), max_n};
}

#define REQUIRE_GRADIENT(input, analytic, loss)                 \
  do {                                                          \
    const GradientCheck check_ = checkGradient(input, analytic, loss); \
    INFO("gradient of " #input ": error " << check_.error);     \
    REQUIRE(check_.max_abs_numeric > 1e-3);                     \
    REQUIRE(check_.error < kMaxGradientError);                  \
  } while (0)

}  // namespace

TEST_CASE("embedding backward matches finite differences", "[kernels][gradients]") {
  const int64_t B = 2, Tn = 5, C = 3, V = 7;
  std::mt19937_64 rng(101);
  // Repeated tokens: the backward must add, not overwrite, their rows.
  const std::vector<int32_t> tokens = {3, 1, 3, 6, 0, 1, 1, 4, 3, 2};
  Vec wte = randomVec(rng, V * C), wpe = randomVec(rng, Tn * C);
  const Vec R = randomVec(rng, B * Tn * C);
  Vec out(R.size());
  auto loss = [&] {
    embeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
    return dot(out, R);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  embeddingBackward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, Tn, C, V, false);
  REQUIRE_GRADIENT(wte, dwte, loss);
  REQUIRE_GRADIENT(wpe, dwpe, loss);
  // Token 5 never occurs: its row of the gradient is exactly zero.
  for (int64_t c = 0; c < C; ++c) CHECK(dwte[5 * C + c] == 0.0);
}

TEST_CASE("layernorm backward matches finite differences", "[kernels][gradients]") {
  const int64_t M = 6, C = 7;
  std::mt19937_64 rng(202);
  // Offset the inputs so the mean is far from zero.
  Vec x = randomVec(rng, M * C, 2.0, 4.0), w = randomVec(rng, C), b = randomVec(rng, C);
  const Vec R = randomVec(rng, M * C);
  Vec y(R.size()), mean(M), rstd(M);
  auto loss = [&] {
    layernormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
    return dot(y, R);
  };
  loss();
  Vec dx(x.size()), dw(C), db(C);
  layernormBackward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), M, C, false, false);
  REQUIRE_GRADIENT(x, dx, loss);
  REQUIRE_GRADIENT(w, dw, loss);
  REQUIRE_GRADIENT(b, db, loss);
}

TEST_CASE("matmul backward matches finite differences", "[kernels][gradients]") {
  // Shapes chosen to hit both full register tiles and ragged edges.
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape s : {Shape{9, 19, 6}, Shape{8, 16, 5}, Shape{3, 2, 11}}) {
    INFO("M " << s.M << " N " << s.N << " K " << s.K);
    std::mt19937_64 rng(303 + s.M);
    Vec x = randomVec(rng, s.M * s.K), W = randomVec(rng, s.N * s.K), bias = randomVec(rng, s.N);
    const Vec R = randomVec(rng, s.M * s.N);
    Vec y(R.size());
    auto loss = [&] {
      matmulForward(y.data(), x.data(), W.data(), bias.data(), s.M, s.N, s.K);
      return dot(y, R);
    };
    Vec dx(x.size()), dW(W.size()), db(bias.size());
    matmulBackwardData(dx.data(), R.data(), W.data(), s.M, s.N, s.K, false);
    matmulBackwardWeight(dW.data(), db.data(), R.data(), x.data(), s.M, s.N, s.K, false);
    REQUIRE_GRADIENT(x, dx, loss);
    REQUIRE_GRADIENT(W, dW, loss);
    REQUIRE_GRADIENT(bias, db, loss);
  }
}

TEST_CASE("attention backward matches finite differences", "[kernels][gradients]") {
  // B = 2, T = 5 (causal rows of 1..5 keys), 3 heads of width 4.
  const int64_t B = 2, Tn = 5, C = 12, H = 3;
  std::mt19937_64 rng(404);
  Vec qkv = randomVec(rng, B * Tn * 3 * C, -1.5, 1.5);
  const Vec R = randomVec(rng, B * Tn * C);
  Vec out(R.size()), lse(B * H * Tn);
  auto loss = [&] {
    attentionForward(out.data(), lse.data(), qkv.data(), B, Tn, C, H);
    return dot(out, R);
  };
  loss();
  Vec dqkv(qkv.size());
  attentionBackward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, Tn, C, H, false);
  REQUIRE_GRADIENT(qkv, dqkv, loss);
  // Causality: perturbing the key and value of the last token must leave the
  // outputs of the earlier tokens exactly as they were.
  const Vec before = out;
  qkv[(0 * Tn + 4) * 3 * C + C + 1] += 0.5;   // a key channel of token 4
  qkv[(0 * Tn + 4) * 3 * C + 2 * C + 2] += 0.5;  // a value channel of token 4
  loss();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < C; ++c) CHECK(out[t * C + c] == before[t * C + c]);
}

TEST_CASE("rmsnorm backward matches finite differences", "[kernels][gradients][llama]") {
  const int64_t M = 6, C = 7;
  std::mt19937_64 rng(212);
  Vec x = randomVec(rng, M * C, -2.0, 3.0), w = randomVec(rng, C);
  const Vec R = randomVec(rng, M * C);
  Vec y(R.size()), rstd(M);
  auto loss = [&] {
    rmsnormForward(y.data(), rstd.data(), x.data(), w.data(), M, C);
    return dot(y, R);
  };
  loss();
  Vec dx(x.size()), dw(C);
  rmsnormBackward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), M, C, false, false);
  REQUIRE_GRADIENT(x, dx, loss);
  REQUIRE_GRADIENT(w, dw, loss);
  // No centring: a constant row, which a layernorm maps to its bias,
  // becomes the weights (its root mean square is the constant).
  for (int64_t c = 0; c < C; ++c) x[size_t(c)] = 2.5;
  loss();
  for (int64_t c = 0; c < C; ++c) CHECK(y[size_t(c)] == Approx(w[size_t(c)] / std::sqrt(1.0 + 1e-5 / 6.25)));
}

TEST_CASE("swiglu backward matches finite differences", "[kernels][gradients][llama]") {
  const int64_t M = 5, F = 6;
  std::mt19937_64 rng(515);
  Vec x = randomVec(rng, M * 2 * F, -5.0, 5.0);
  x[0] = 0.0;  // silu's origin
  const Vec R = randomVec(rng, M * F);
  Vec y(R.size());
  auto loss = [&] {
    swigluForward(y.data(), x.data(), M, F);
    return dot(y, R);
  };
  Vec dx(x.size());
  swigluBackward(dx.data(), R.data(), x.data(), M, F, false);
  REQUIRE_GRADIENT(x, dx, loss);
  // y = silu(gate) * up: a zero gate gives zero whatever the up half.
  loss();
  CHECK(y[0] == 0.0);
}

TEST_CASE("squared ReLU backward matches finite differences", "[kernels][gradients][llama]") {
  const int64_t n = 40;
  std::mt19937_64 rng(516);
  Vec x = randomVec(rng, n, -3.0, 3.0);
  for (double& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;  // away from the kink, where differences straddle it
  const Vec R = randomVec(rng, n);
  Vec y(R.size());
  auto loss = [&] {
    squaredReluForward(y.data(), x.data(), n);
    return dot(y, R);
  };
  Vec dx(x.size());
  squaredReluBackward(dx.data(), R.data(), x.data(), n, false);
  REQUIRE_GRADIENT(x, dx, loss);
  // relu(-2)^2 = 0 and relu(3)^2 = 9.
  x[0] = -2.0;
  x[1] = 3.0;
  loss();
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 9.0);
}

TEST_CASE("grouped-query attention with rotary embeddings matches finite differences", "[kernels][gradients][llama]") {
  // 4 query heads of width 4 sharing 2 key/value heads, and the
  // multi-head case (as many key/value heads as query heads).
  for (const int64_t KV : {int64_t(2), int64_t(4), int64_t(1)}) {
    INFO(KV << " key/value heads");
    const int64_t B = 2, Tn = 5, H = 4, D = 4, C = H * D;
    std::mt19937_64 rng(606 + KV);
    Vec qkv = randomVec(rng, B * Tn * (H + 2 * KV) * D, -1.5, 1.5);
    const Vec R = randomVec(rng, B * Tn * C);
    Vec out(R.size()), lse(B * H * Tn);
    auto loss = [&] {
      groupedAttentionForward(out.data(), lse.data(), qkv.data(), B, Tn, C, H, KV);
      return dot(out, R);
    };
    loss();
    Vec dqkv(qkv.size());
    groupedAttentionBackward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, Tn, C, H, KV, false);
    REQUIRE_GRADIENT(qkv, dqkv, loss);
  }
  // The rotation itself, on one head of width 2 (one pair, angle t rad at
  // position t): query (1, 0) at position 1 against keys (1, 0) at
  // positions 0 and 1 scores cos(1) / sqrt(2) and 1 / sqrt(2); values (1, 0)
  // and (0, 1) make the output those two weights.
  const double layout[] = {0, 0, 1, 0, 1, 0,   // position 0: q, k, v
                           1, 0, 1, 0, 0, 1};  // position 1
  Vec two(std::begin(layout), std::end(layout)), out2(4), lse2(2);
  groupedAttentionForward(out2.data(), lse2.data(), two.data(), 1, 2, 2, 1, 1);
  const double s0 = std::cos(1.0) / std::sqrt(2.0), s1 = 1.0 / std::sqrt(2.0);
  const double p0 = std::exp(s0) / (std::exp(s0) + std::exp(s1));
  CHECK(out2[2] == Approx(p0).epsilon(1e-12));
  CHECK(out2[3] == Approx(1.0 - p0).epsilon(1e-12));
}

TEST_CASE("gelu backward matches finite differences", "[kernels][gradients]") {
  std::mt19937_64 rng(505);
  Vec x = randomVec(rng, 60, -6.0, 6.0);
  x[0] = 0.0;  // the origin, where tanh u = 0
  const Vec R = randomVec(rng, x.size());
  Vec y(x.size());
  auto loss = [&] {
    geluForward(y.data(), x.data(), int64_t(x.size()));
    return dot(y, R);
  };
  Vec dx(x.size());
  geluBackward(dx.data(), R.data(), x.data(), int64_t(x.size()), false);
  REQUIRE_GRADIENT(x, dx, loss);
}

TEST_CASE("cross-entropy backward matches finite differences", "[kernels][gradients]") {
  const int64_t M = 4, V = 9;
  std::mt19937_64 rng(606);
  Vec logits = randomVec(rng, M * V, -3.0, 3.0);
  logits[2 * V + 5] = 40.0;  // one confident row: the max shift must keep exp finite
  const std::vector<int32_t> targets = {0, 8, 5, 3};
  const Vec R = randomVec(rng, M);
  Vec losses(M);
  auto loss = [&] {
    crossEntropyForward(losses.data(), logits.data(), targets.data(), M, V);
    return dot(losses, R);
  };
  // dL/dlogits[m,:] = R[m] * (softmax - onehot): one backward call per row
  // with the row's projection weight as the scale.
  Vec dlogits(logits.size());
  for (int64_t m = 0; m < M; ++m)
    crossEntropyBackward(dlogits.data() + m * V, logits.data() + m * V, targets.data() + m, 1, V,
                         R[std::size_t(m)]);
  REQUIRE_GRADIENT(logits, dlogits, loss);
}

TEST_CASE("cross-entropy backward applies its scale to whole batches", "[kernels][gradients]") {
  const int64_t M = 5, V = 6;
  const double scale = 1.0 / double(M);  // the mean over the batch, as the executor uses it
  std::mt19937_64 rng(607);
  Vec logits = randomVec(rng, M * V, -2.0, 2.0);
  const std::vector<int32_t> targets = {1, 0, 5, 5, 2};
  Vec losses(M);
  auto loss = [&] {
    crossEntropyForward(losses.data(), logits.data(), targets.data(), M, V);
    double sum = 0;
    for (double l : losses) sum += l;
    return scale * sum;
  };
  Vec dlogits(logits.size());
  crossEntropyBackward(dlogits.data(), logits.data(), targets.data(), M, V, scale);
  REQUIRE_GRADIENT(logits, dlogits, loss);
}

TEST_CASE("add passes the output gradient to both inputs", "[kernels][gradients]") {
  std::mt19937_64 rng(707);
  Vec a = randomVec(rng, 13), b = randomVec(rng, 13);
  const Vec R = randomVec(rng, 13);
  Vec c(13);
  auto loss = [&] {
    addForward(c.data(), a.data(), b.data(), 13);
    return dot(c, R);
  };
  REQUIRE_GRADIENT(a, R, loss);
  REQUIRE_GRADIENT(b, R, loss);
}

// accumulate=true must add a second contribution; accumulate=false must
// overwrite whatever the output held (here NaN, which would poison an add).
TEST_CASE("backward kernels overwrite or accumulate as asked", "[kernels][accumulate]") {
  std::mt19937_64 rng(808);
  const double nan = std::nan("");
  auto requireDoubled = [](const Vec& once, const Vec& twice) {
    REQUIRE(once.size() == twice.size());
    for (std::size_t i = 0; i < once.size(); ++i) {
      REQUIRE(std::isfinite(once[i]));
      REQUIRE(twice[i] == Approx(2 * once[i]).margin(1e-14).epsilon(1e-13));
    }
  };

  SECTION("embedding") {
    const int64_t B = 2, Tn = 3, C = 4, V = 5;
    const std::vector<int32_t> tokens = {1, 1, 4, 0, 1, 2};
    const Vec dout = randomVec(rng, B * Tn * C);
    Vec dwte(V * C, nan), dwpe(Tn * C, nan);
    embeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C, V, false);
    const Vec dwte1 = dwte, dwpe1 = dwpe;
    for (int64_t c = 0; c < C; ++c) REQUIRE(dwte1[3 * C + c] == 0.0);  // token 3 unused: zeroed
    embeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C, V, true);
    requireDoubled(dwte1, dwte);
    requireDoubled(dwpe1, dwpe);
  }
  SECTION("layernorm") {
    const int64_t M = 5, C = 6;
    const Vec x = randomVec(rng, M * C), w = randomVec(rng, C), b = randomVec(rng, C);
    const Vec dy = randomVec(rng, M * C);
    Vec y(M * C), mean(M), rstd(M);
    layernormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
    Vec dx(M * C, nan), dw(C, nan), db(C, nan);
    layernormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), M, C, false, false);
    const Vec dx1 = dx, dw1 = dw, db1 = db;
    // Accumulating dx only leaves dw and db overwritten (equal, not doubled).
    layernormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), M, C, true, false);
    requireDoubled(dx1, dx);
    REQUIRE(dw == dw1);
    REQUIRE(db == db1);
    layernormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), M, C, false, true);
    REQUIRE(dx == dx1);
    requireDoubled(dw1, dw);
    requireDoubled(db1, db);
  }
  SECTION("matmul") {
    const int64_t M = 9, N = 19, K = 7;
    const Vec x = randomVec(rng, M * K), W = randomVec(rng, N * K), dy = randomVec(rng, M * N);
    Vec dx(M * K, nan), dW(N * K, nan), db(N, nan);
    matmulBackwardData(dx.data(), dy.data(), W.data(), M, N, K, false);
    matmulBackwardWeight(dW.data(), db.data(), dy.data(), x.data(), M, N, K, false);
    const Vec dx1 = dx, dW1 = dW, db1 = db;
    matmulBackwardData(dx.data(), dy.data(), W.data(), M, N, K, true);
    matmulBackwardWeight(dW.data(), db.data(), dy.data(), x.data(), M, N, K, true);
    requireDoubled(dx1, dx);
    requireDoubled(dW1, dW);
    requireDoubled(db1, db);
  }
  SECTION("attention") {
    const int64_t B = 2, Tn = 5, C = 8, H = 2;
    const Vec qkv = randomVec(rng, B * Tn * 3 * C), dout = randomVec(rng, B * Tn * C);
    Vec out(B * Tn * C), lse(B * H * Tn);
    attentionForward(out.data(), lse.data(), qkv.data(), B, Tn, C, H);
    Vec dqkv(qkv.size(), nan);
    attentionBackward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, Tn, C, H, false);
    const Vec once = dqkv;
    attentionBackward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, Tn, C, H, true);
    requireDoubled(once, dqkv);
  }
  SECTION("gelu") {
    const Vec x = randomVec(rng, 17, -4, 4), dy = randomVec(rng, 17);
    Vec dx(17, nan);
    geluBackward(dx.data(), dy.data(), x.data(), 17, false);
    const Vec once = dx;
    geluBackward(dx.data(), dy.data(), x.data(), 17, true);
    requireDoubled(once, dx);
  }
}
