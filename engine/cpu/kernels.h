#pragma once
// CPU reference kernels: written for clarity and exactness first, with
// cache-friendly loops (register-tiled matmuls, attention streamed one query
// row at a time) so CI can train a tiny model for hundreds of steps. Templated
// on the element type so the same code runs in float (the executor) and double
// (the finite-difference checks of every backward rule). Statistics (layernorm
// mean/variance, softmax and log-sum-exp sums, bias and norm reductions) are
// accumulated in double; matmul dot products in T.
//
// Layouts are row-major. `accumulate` means "add into the output" (a second
// gradient contribution, or a later micro-batch); otherwise the output is
// overwritten. Explicit instantiations for float and double are in kernels.cpp
// and kernels_{matmul,attention,loss}.cpp. Errors (a token or target outside
// the vocabulary, C not a multiple of H, AdamW step < 1) throw
// std::runtime_error.

#include <cstdint>

#include "engine/numerics/constants.h"

namespace tandem::cpu {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe may be null: no positions)
template <class T>
void embeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                      int64_t Tn, int64_t C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (dwpe may be null)
// accumulate=false zeroes dwte (V x C) and dwpe (Tn x C) first.
template <class T>
void embeddingBackward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                       int64_t Tn, int64_t C, int64_t V, bool accumulate);

// y = (x - mean) * rstd * w + b over the last dimension C, eps = 1e-5.
template <class T>
void layernormForward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t M,
                      int64_t C);
template <class T>
void layernormBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                       const T* rstd, int64_t M, int64_t C, bool accumulate_dx,
                       bool accumulate_dw);

// y[M,N] = x[M,K] * W[N,K]^T + bias[N] (bias may be null)
template <class T>
void matmulForward(T* y, const T* x, const T* W, const T* bias, int64_t M, int64_t N, int64_t K);
// dx[M,K] = dy[M,N] * W[N,K]
template <class T>
void matmulBackwardData(T* dx, const T* dy, const T* W, int64_t M, int64_t N, int64_t K,
                        bool accumulate);
// dW[N,K] = dy^T * x; db[N] = sum_m dy[m,:] (db may be null)
template <class T>
void matmulBackwardWeight(T* dW, T* db, const T* dy, const T* x, int64_t M, int64_t N, int64_t K,
                          bool accumulate);
// db[N] (+)= sum_m dy[m,:]: a bias gradient, wherever it is summed.
template <class T>
void columnSums(T* db, const T* dy, int64_t M, int64_t N, bool accumulate);

// Causal multi-head self-attention. qkv[B,Tn,3C]: q in [0,C), k in [C,2C),
// v in [2C,3C); head h uses channels [h*D,(h+1)*D), D = C/H; scale 1/sqrt(D).
// out[B,Tn,C]; lse[B,H,Tn] = log-sum-exp of the scaled scores of each query
// row, so the backward rebuilds the probabilities without keeping Tn x Tn.
// With `probs` (the materialized form, schedule.materialized_attention)
// the forward also writes them, [B, H, Tn, Tn] with zeros past the
// diagonal, and a backward given `saved_probs` reads them instead of
// rebuilding them from lse (which it then does not read).
//
// With `dropout` as well (model.attention_dropout) the forward draws a
// mask over the probabilities (1 = kept, with probability 1 - p; zero past
// the diagonal), writes it and the dropped probabilities (kept ones scaled
// by 1 / (1 - p)) and multiplies V by those; the backward reads both.
// Draws depend on the key and the element's place in [B, H, Tn, Tn] only.
template <class T>
struct AttentionDropout {
  double p = 0;
  uint64_t key = 0;
  T* dropped = nullptr;
  uint8_t* mask = nullptr;
};
// Whether element `index` of the draw `key` is kept: a hash of both to a
// uniform number in [0, 1), kept when it is at least p.
bool keptByDropout(uint64_t key, uint64_t index, double p);
template <class T>
void attentionForward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H,
                      T* probs = nullptr, const AttentionDropout<T>* dropout = nullptr);
template <class T>
void attentionBackward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                       int64_t Tn, int64_t C, int64_t H, bool accumulate, const T* saved_probs = nullptr,
                       const AttentionDropout<T>* dropout = nullptr);

// The Llama family (kernels_llama.cpp); its constants are engine/numerics/constants.h.
// y = x / sqrt(mean(x^2) + 1e-5) * w over the last dimension C; rstd[M].
template <class T>
void rmsnormForward(T* y, T* rstd, const T* x, const T* w, int64_t M, int64_t C);
template <class T>
void rmsnormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t M, int64_t C,
                     bool accumulate_dx, bool accumulate_dw);
// x[M, 2F] = [gate | up] per row: y[M, F] = silu(gate) * up.
template <class T>
void swigluForward(T* y, const T* x, int64_t M, int64_t F);
template <class T>
void swigluBackward(T* dx, const T* dy, const T* x, int64_t M, int64_t F, bool accumulate);
// y = relu(x)^2 elementwise (Nemotron-4's MLP activation).
template <class T>
void squaredReluForward(T* y, const T* x, int64_t n);
template <class T>
void squaredReluBackward(T* dx, const T* dy, const T* x, int64_t n, bool accumulate);
// Causal grouped-query attention with rotary embeddings: H query heads of
// width D = C / H share KV key/value heads (H / KV each); each token's qkv
// row [(H + 2 KV) D] is laid out by group: [q of the group's heads, k, v].
// q and k are rotated by the token's position t within its sequence
// (pairs (i, i + D/2), angle t * kRopeTheta^(-2i/D)) before the scores.
// out[B, Tn, C] by query head; lse[B, H, Tn] as attentionForward's.
// `probs` and `saved_probs` as attentionForward's and attentionBackward's.
template <class T>
void groupedAttentionForward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H,
                             int64_t KV, T* probs = nullptr, const AttentionDropout<T>* dropout = nullptr);
template <class T>
void groupedAttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                              int64_t Tn, int64_t C, int64_t H, int64_t KV, bool accumulate,
                              const T* saved_probs = nullptr, const AttentionDropout<T>* dropout = nullptr);

// GELU, tanh approximation (GPT-2).
template <class T>
void geluForward(T* y, const T* x, int64_t n);
template <class T>
void geluBackward(T* dx, const T* dy, const T* x, int64_t n, bool accumulate);

template <class T>
void addForward(T* c, const T* a, const T* b, int64_t n);

// losses[m] = -log softmax(logits[m,:])[targets[m]]
template <class T>
void crossEntropyForward(T* losses, const T* logits, const int32_t* targets, int64_t M, int64_t V);
// dlogits[m,:] = scale * (softmax(logits[m,:]) - onehot(targets[m])).
// dlogits may alias logits (in place).
template <class T>
void crossEntropyBackward(T* dlogits, const T* logits, const int32_t* targets, int64_t M,
                          int64_t V, double scale);

// Sum of squares (accumulated in double).
template <class T>
double sumOfSquares(const T* x, int64_t n);

// One AdamW step on n fp32 values (PyTorch's decoupled weight decay):
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), mhat = m/(1-b1^t), vhat = v/(1-b2^t)
void adamwStep(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int step, float grad_scale);

}  // namespace tandem::cpu
