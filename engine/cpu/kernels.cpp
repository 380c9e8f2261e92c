// Embedding, layernorm, add, the optimizer and the reductions used by the
// gradient norm. Matmuls are in kernels_matmul.cpp, attention in
// kernels_attention.cpp, GELU in kernels_gelu.cpp and the loss in
// kernels_loss.cpp.
//
// Precision: statistics (layernorm mean and variance, the dw/db sums over all
// rows, sums of squares) are accumulated in double whatever T is, so in float
// they lose nothing to long sums: their error is the final rounding to float.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"

namespace tandem::cpu {
namespace {


void checkToken(int32_t token, int64_t index, int64_t V) {
  if (token < 0 || (V > 0 && token >= V)) {
    throw std::runtime_error("embedding: token id " + std::to_string(token) + " at position " +
                             std::to_string(index) + " is outside the vocabulary [0, " +
                             (V > 0 ? std::to_string(V) : std::string("V")) + ")");
  }
}

}  // namespace

// ---------------------------------------------------------------- embedding

template <class T>
void embeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                      int64_t Tn, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t bt = b * Tn + t;
      // The forward does not know V; the upper bound is checked by whoever
      // loads the batch and again by the backward.
      checkToken(tokens[bt], bt, 0);
      const T* tok_row = wte + int64_t(tokens[bt]) * C;
      T* out_row = out + bt * C;
      if (!wpe) {  // no learned positions (Llama: rotary embeddings in the attention)
        for (int64_t c = 0; c < C; ++c) out_row[c] = tok_row[c];
        continue;
      }
      const T* pos_row = wpe + t * C;
      for (int64_t c = 0; c < C; ++c) out_row[c] = tok_row[c] + pos_row[c];
    }
  }
}

template <class T>
void embeddingBackward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                       int64_t Tn, int64_t C, int64_t V, bool accumulate) {
  if (!accumulate) {
    for (int64_t i = 0; i < V * C; ++i) dwte[i] = 0;
    if (dwpe)
      for (int64_t i = 0; i < Tn * C; ++i) dwpe[i] = 0;
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t bt = b * Tn + t;
      checkToken(tokens[bt], bt, V);
      const T* d_row = dout + bt * C;
      T* tok_row = dwte + int64_t(tokens[bt]) * C;
      for (int64_t c = 0; c < C; ++c) tok_row[c] += d_row[c];
      if (!dwpe) continue;
      T* pos_row = dwpe + t * C;
      for (int64_t c = 0; c < C; ++c) pos_row[c] += d_row[c];
    }
  }
}

// ---------------------------------------------------------------- layernorm

template <class T>
void layernormForward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t M,
                      int64_t C) {
  for (int64_t m = 0; m < M; ++m) {
    const T* x_row = x + m * C;
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2,
    // which cancels badly when the mean is large next to the spread.
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += double(x_row[c]);
    const double mu = sum / double(C);
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = double(x_row[c]) - mu;
      sq += d * d;
    }
    const double r = 1.0 / std::sqrt(sq / double(C) + kLayerNormEps);  // biased variance
    T* y_row = y + m * C;
    for (int64_t c = 0; c < C; ++c)
      y_row[c] = T((double(x_row[c]) - mu) * r * double(w[c]) + double(b[c]));
    mean[m] = T(mu);
    rstd[m] = T(r);
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w and
// xhat = (x - mean) * rstd; dw = sum_rows dy * xhat; db = sum_rows dy.
// Each row reads dy and x before writing dx, so dx may alias dy.
template <class T>
void layernormBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                       const T* rstd, int64_t M, int64_t C, bool accumulate_dx,
                       bool accumulate_dw) {
  std::vector<double> dw_sum(std::size_t(C), 0.0);
  std::vector<double> db_sum(std::size_t(C), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const T* dy_row = dy + m * C;
    const T* x_row = x + m * C;
    const double mu = double(mean[m]);
    const double r = double(rstd[m]);
    double g_sum = 0;
    double g_xhat_sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (double(x_row[c]) - mu) * r;
      const double g = double(dy_row[c]) * double(w[c]);
      g_sum += g;
      g_xhat_sum += g * xhat;
      dw_sum[std::size_t(c)] += double(dy_row[c]) * xhat;
      db_sum[std::size_t(c)] += double(dy_row[c]);
    }
    const double g_mean = g_sum / double(C);
    const double g_xhat_mean = g_xhat_sum / double(C);
    T* dx_row = dx + m * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (double(x_row[c]) - mu) * r;
      const double g = double(dy_row[c]) * double(w[c]);
      const T grad = T(r * (g - g_mean - xhat * g_xhat_mean));
      dx_row[c] = accumulate_dx ? T(dx_row[c] + grad) : grad;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    const T dw_c = T(dw_sum[std::size_t(c)]);
    const T db_c = T(db_sum[std::size_t(c)]);
    dw[c] = accumulate_dw ? T(dw[c] + dw_c) : dw_c;
    db[c] = accumulate_dw ? T(db[c] + db_c) : db_c;
  }
}

// ---------------------------------------------------------------- pointwise

template <class T>
void addForward(T* c, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

template <class T>
double sumOfSquares(const T* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

// ---------------------------------------------------------------- optimizer

// PyTorch's AdamW: p <- p (1 - lr wd) - lr * mhat / (sqrt(vhat) + eps). The
// update term does not depend on p, so this equals the header's formula with
// the old p. Intermediates are in double; m, v and p are stored as float.
void adamwStep(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int step, float grad_scale) {
  if (step < 1) {
    throw std::runtime_error("adamwStep: step is " + std::to_string(step) +
                             "; steps count from 1 (bias correction divides by 1 - beta^step)");
  }
  const double b1 = beta1;
  const double b2 = beta2;
  const double correction1 = 1.0 - std::pow(b1, step);
  const double correction2 = 1.0 - std::pow(b2, step);
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(grad[i]) * double(grad_scale);
    const double m_new = b1 * double(m[i]) + (1.0 - b1) * g;
    const double v_new = b2 * double(v[i]) + (1.0 - b2) * g * g;
    m[i] = float(m_new);
    v[i] = float(v_new);
    const double m_hat = m_new / correction1;
    const double v_hat = v_new / correction2;
    const double p = double(param[i]);
    param[i] = float(p - double(lr) * (m_hat / (std::sqrt(v_hat) + double(eps)) +
                                       double(weight_decay) * p));
  }
}

#define TANDEM_INSTANTIATE_KERNELS(T)                                                              \
  template void embeddingForward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,      \
                                    int64_t);                                                      \
  template void embeddingBackward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t,  \
                                     int64_t, bool);                                               \
  template void layernormForward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t);   \
  template void layernormBackward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                     int64_t, int64_t, bool, bool);                                \
  template void addForward<T>(T*, const T*, const T*, int64_t);                                    \
  template double sumOfSquares<T>(const T*, int64_t);

TANDEM_INSTANTIATE_KERNELS(float)
TANDEM_INSTANTIATE_KERNELS(double)
#undef TANDEM_INSTANTIATE_KERNELS

}  // namespace tandem::cpu
