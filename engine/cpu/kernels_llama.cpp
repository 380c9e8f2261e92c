// The Llama family's reference kernels: RMSNorm, the SwiGLU gate and
// grouped-query attention with rotary position embeddings.
//
// Grouped-query attention is computed through the multi-head kernels of
// kernels_attention.cpp: each token's grouped qkv row is expanded into the
// [q | k | v] layout of H heads (q and k rotated, each key/value head
// repeated for the query heads that share it), and the backward folds the
// expanded gradient back (rotated back, summed over the sharing heads). The
// expansion costs memory, not exactness: the arithmetic on each score and
// weighted sum is the multi-head kernels' own.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"

namespace tandem::cpu {
namespace {


struct GroupedShape {
  int64_t H, KV, D, R;  // query heads, key/value heads, head width, query heads per group
  int64_t width;        // elements of one token's grouped qkv row: (H + 2 KV) D
};

GroupedShape groupedShape(int64_t C, int64_t H, int64_t KV) {
  if (H <= 0 || C % H != 0 || KV <= 0 || H % KV != 0)
    throw std::runtime_error("grouped attention: " + std::to_string(H) + " query heads of width C = " +
                             std::to_string(C) + " cannot share " + std::to_string(KV) + " key/value heads");
  const int64_t D = C / H;
  if (D % 2 != 0) throw std::runtime_error("rotary embeddings need an even head width, got " + std::to_string(D));
  return {H, KV, D, H / KV, (H + 2 * KV) * D};
}

// Rotates (x[i], x[i + D/2]) by position t's angle for frequency i (the
// "rotate half" pairing); `inverse` applies the transpose (the backward).
template <class T>
void rotate(T* x, int64_t t, int64_t D, bool inverse) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = double(t) * std::pow(kRopeTheta, -2.0 * double(i) / double(D));
    const double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
    const double a = double(x[i]), b = double(x[i + half]);
    x[i] = T(a * c - b * s);
    x[i + half] = T(a * s + b * c);
  }
}

// The [B, Tn, 3C] multi-head layout of a grouped qkv, q and k rotated.
template <class T>
std::vector<T> expand(const T* qkv, int64_t B, int64_t Tn, const GroupedShape& g) {
  const int64_t C = g.H * g.D;
  std::vector<T> out(std::size_t(B * Tn * 3 * C));
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    const int64_t t = bt % Tn;
    const T* src = qkv + bt * g.width;
    T* dst = out.data() + bt * 3 * C;
    for (int64_t h = 0; h < g.H; ++h) {
      const T* group = src + (h / g.R) * (g.R + 2) * g.D;
      const T* q = group + (h % g.R) * g.D;
      const T* k = group + g.R * g.D;
      const T* v = k + g.D;
      for (int64_t d = 0; d < g.D; ++d) {
        dst[h * g.D + d] = q[d];
        dst[C + h * g.D + d] = k[d];
        dst[2 * C + h * g.D + d] = v[d];
      }
      rotate(dst + h * g.D, t, g.D, false);
      rotate(dst + C + h * g.D, t, g.D, false);
    }
  }
  return out;
}

}  // namespace

template <class T>
void rmsnormForward(T* y, T* rstd, const T* x, const T* w, int64_t M, int64_t C) {
  for (int64_t m = 0; m < M; ++m) {
    const T* x_row = x + m * C;
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += double(x_row[c]) * double(x_row[c]);
    const double r = 1.0 / std::sqrt(sq / double(C) + kRmsNormEps);
    T* y_row = y + m * C;
    for (int64_t c = 0; c < C; ++c) y_row[c] = T(double(x_row[c]) * r * double(w[c]));
    rstd[m] = T(r);
  }
}

// With xhat = x rstd and g = dy w: dx = rstd (g - xhat mean(g xhat)),
// dw = sum_rows dy xhat. Each row reads dy and x before writing dx.
template <class T>
void rmsnormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t M, int64_t C,
                     bool accumulate_dx, bool accumulate_dw) {
  std::vector<double> dw_sum(std::size_t(C), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const T* dy_row = dy + m * C;
    const T* x_row = x + m * C;
    const double r = double(rstd[m]);
    double g_xhat_sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = double(x_row[c]) * r;
      g_xhat_sum += double(dy_row[c]) * double(w[c]) * xhat;
      dw_sum[std::size_t(c)] += double(dy_row[c]) * xhat;
    }
    const double g_xhat_mean = g_xhat_sum / double(C);
    T* dx_row = dx + m * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = double(x_row[c]) * r;
      const T grad = T(r * (double(dy_row[c]) * double(w[c]) - xhat * g_xhat_mean));
      dx_row[c] = accumulate_dx ? T(dx_row[c] + grad) : grad;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    const T dw_c = T(dw_sum[std::size_t(c)]);
    dw[c] = accumulate_dw ? T(dw[c] + dw_c) : dw_c;
  }
}

template <class T>
void swigluForward(T* y, const T* x, int64_t M, int64_t F) {
  for (int64_t m = 0; m < M; ++m) {
    const T* gate = x + m * 2 * F;
    const T* up = gate + F;
    for (int64_t f = 0; f < F; ++f) {
      const double g = double(gate[f]);
      y[m * F + f] = T(g / (1.0 + std::exp(-g)) * double(up[f]));
    }
  }
}

// d gate = dy up sigmoid(g) (1 + g (1 - sigmoid(g))), d up = dy silu(g).
template <class T>
void swigluBackward(T* dx, const T* dy, const T* x, int64_t M, int64_t F, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    const T* gate = x + m * 2 * F;
    const T* up = gate + F;
    T* dgate = dx + m * 2 * F;
    T* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      const double g = double(gate[f]), sig = 1.0 / (1.0 + std::exp(-g)), d = double(dy[m * F + f]);
      const T grad_gate = T(d * double(up[f]) * sig * (1.0 + g * (1.0 - sig)));
      const T grad_up = T(d * g * sig);
      dgate[f] = accumulate ? T(dgate[f] + grad_gate) : grad_gate;
      dup[f] = accumulate ? T(dup[f] + grad_up) : grad_up;
    }
  }
}

template <class T>
void squaredReluForward(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? T(x[i] * x[i]) : T(0);
}

// d relu(x)^2 / dx = 2 relu(x).
template <class T>
void squaredReluBackward(T* dx, const T* dy, const T* x, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = x[i] > T(0) ? T(T(2) * x[i] * dy[i]) : T(0);
    dx[i] = accumulate ? T(dx[i] + g) : g;
  }
}

template <class T>
void groupedAttentionForward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H,
                             int64_t KV, T* probs, const AttentionDropout<T>* dropout) {
  const GroupedShape g = groupedShape(C, H, KV);
  const std::vector<T> full = expand(qkv, B, Tn, g);
  attentionForward<T>(out, lse, full.data(), B, Tn, C, H, probs, dropout);
}

template <class T>
void groupedAttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                              int64_t Tn, int64_t C, int64_t H, int64_t KV, bool accumulate,
                              const T* saved_probs, const AttentionDropout<T>* dropout) {
  const GroupedShape g = groupedShape(C, H, KV);
  const std::vector<T> full = expand(qkv, B, Tn, g);
  std::vector<T> dfull(full.size());
  attentionBackward<T>(dfull.data(), dout, full.data(), out, lse, B, Tn, C, H, false, saved_probs, dropout);
  std::vector<T> dk(std::size_t(g.D)), dv(std::size_t(g.D));
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    const int64_t t = bt % Tn;
    T* src = dfull.data() + bt * 3 * C;
    T* dst = dqkv + bt * g.width;
    for (int64_t kv = 0; kv < g.KV; ++kv) {
      T* group = dst + kv * (g.R + 2) * g.D;
      std::fill(dk.begin(), dk.end(), T(0));
      std::fill(dv.begin(), dv.end(), T(0));
      for (int64_t j = 0; j < g.R; ++j) {
        const int64_t h = kv * g.R + j;
        T* dq = src + h * g.D;
        T* dk_h = src + C + h * g.D;
        rotate(dq, t, g.D, true);
        rotate(dk_h, t, g.D, true);
        for (int64_t d = 0; d < g.D; ++d) {
          group[j * g.D + d] = accumulate ? T(group[j * g.D + d] + dq[d]) : dq[d];
          dk[std::size_t(d)] += dk_h[d];
          dv[std::size_t(d)] += src[2 * C + h * g.D + d];
        }
      }
      T* k = group + g.R * g.D;
      T* v = k + g.D;
      for (int64_t d = 0; d < g.D; ++d) {
        k[d] = accumulate ? T(k[d] + dk[std::size_t(d)]) : dk[std::size_t(d)];
        v[d] = accumulate ? T(v[d] + dv[std::size_t(d)]) : dv[std::size_t(d)];
      }
    }
  }
}

#define TANDEM_INSTANTIATE_LLAMA(T)                                                                              \
  template void rmsnormForward<T>(T*, T*, const T*, const T*, int64_t, int64_t);                                \
  template void rmsnormBackward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, bool, bool); \
  template void swigluForward<T>(T*, const T*, int64_t, int64_t);                                              \
  template void swigluBackward<T>(T*, const T*, const T*, int64_t, int64_t, bool);                             \
  template void squaredReluForward<T>(T*, const T*, int64_t);                                                  \
  template void squaredReluBackward<T>(T*, const T*, const T*, int64_t, bool);                                 \
  template void groupedAttentionForward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, T*, \
                                           const AttentionDropout<T>*);                                        \
  template void groupedAttentionBackward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t,      \
                                            int64_t, int64_t, int64_t, bool, const T*, const AttentionDropout<T>*);

TANDEM_INSTANTIATE_LLAMA(float)
TANDEM_INSTANTIATE_LLAMA(double)
#undef TANDEM_INSTANTIATE_LLAMA

}  // namespace tandem::cpu
