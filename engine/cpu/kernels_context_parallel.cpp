#include "engine/cpu/kernels_context_parallel.h"

#include <cstddef>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/spec/job.h"

namespace tandem::cpu {

int64_t AttentionLayout::kvColumn(int64_t i) const {
  const int64_t D = headWidth(), KV = keyHeads();
  const int64_t value = i / (KV * D), head = (i % (KV * D)) / D, d = i % D;
  if (kv_heads <= 0) return (1 + value) * C + head * D + d;
  // Llama's group `head`: [its H / KV query heads, k, v].
  const int64_t group_width = (H / KV + 2) * D;
  return head * group_width + (H / KV + value) * D + d;
}

namespace {

// The key/value columns of a layout, in packed order, and which qkv
// columns they are.
struct KvColumns {
  std::vector<int64_t> of_packed;
  std::vector<char> is_kv;
  explicit KvColumns(const AttentionLayout& layout)
      : of_packed(static_cast<size_t>(layout.kvWidth())), is_kv(static_cast<size_t>(layout.rowWidth()), 0) {
    for (int64_t i = 0; i < layout.kvWidth(); ++i) {
      of_packed[size_t(i)] = layout.kvColumn(i);
      is_kv[size_t(of_packed[size_t(i)])] = 1;
    }
  }
};

// The whole sequence's qkv [B, cp T, W]: every rank's keys and values at
// their positions, this rank's queries at theirs, every other query zero.
template <class T>
std::vector<T> wholeSequence(const T* qkv, const T* gathered, int64_t B, int64_t Tn, const AttentionLayout& layout,
                             const KvColumns& columns, int place, int cp) {
  const int64_t W = layout.rowWidth(), KW = layout.kvWidth(), whole = Tn * cp;
  std::vector<T> full(static_cast<size_t>(B * whole * W), T(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t at = contextParallelPosition(t, Tn, place, cp);
      const T* src = qkv + (b * Tn + t) * W;
      T* dst = full.data() + (b * whole + at) * W;
      for (int64_t w = 0; w < W; ++w) dst[w] = src[w];
    }
  for (int r = 0; r < cp; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t at = contextParallelPosition(t, Tn, r, cp);
        const T* src = gathered + ((int64_t(r) * B + b) * Tn + t) * KW;
        T* dst = full.data() + (b * whole + at) * W;
        for (int64_t i = 0; i < KW; ++i) dst[columns.of_packed[size_t(i)]] = src[i];
      }
  return full;
}

// Rows [B, T, width] of the rank's tokens spread to their positions in [B, cp T, width] (zero elsewhere).
template <class T>
std::vector<T> spreadRows(const T* rows, int64_t B, int64_t Tn, int64_t width, int place, int cp) {
  const int64_t whole = Tn * cp;
  std::vector<T> full(static_cast<size_t>(B * whole * width), T(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t at = contextParallelPosition(t, Tn, place, cp);
      for (int64_t w = 0; w < width; ++w) full[size_t((b * whole + at) * width + w)] = rows[(b * Tn + t) * width + w];
    }
  return full;
}

// The per-head rows lse[B, H, T] spread the same way.
template <class T>
std::vector<T> spreadLse(const T* lse, int64_t B, int64_t H, int64_t Tn, int place, int cp) {
  const int64_t whole = Tn * cp;
  std::vector<T> full(static_cast<size_t>(B * H * whole), T(0));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t t = 0; t < Tn; ++t)
      full[size_t(bh * whole + contextParallelPosition(t, Tn, place, cp))] = lse[bh * Tn + t];
  return full;
}

}  // namespace

template <class T>
void packKv(T* kv, const T* qkv, int64_t M, const AttentionLayout& layout) {
  const KvColumns columns(layout);
  const int64_t W = layout.rowWidth(), KW = layout.kvWidth();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < KW; ++i) kv[m * KW + i] = qkv[m * W + columns.of_packed[size_t(i)]];
}

template <class T>
void packKvBackward(T* dqkv, const T* dkv, int64_t M, const AttentionLayout& layout, bool accumulate) {
  const KvColumns columns(layout);
  const int64_t W = layout.rowWidth(), KW = layout.kvWidth();
  for (int64_t m = 0; m < M; ++m) {
    T* row = dqkv + m * W;
    if (!accumulate)
      for (int64_t w = 0; w < W; ++w) row[w] = T(0);
    for (int64_t i = 0; i < KW; ++i) row[columns.of_packed[size_t(i)]] += dkv[m * KW + i];
  }
}

template <class T>
void contextParallelAttentionForward(T* out, T* lse, const T* qkv, const T* gathered, int64_t B, int64_t Tn,
                                     const AttentionLayout& layout, int place, int cp) {
  const KvColumns columns(layout);
  const int64_t whole = Tn * cp, C = layout.C, H = layout.H;
  const std::vector<T> full = wholeSequence(qkv, gathered, B, Tn, layout, columns, place, cp);
  std::vector<T> full_out(static_cast<size_t>(B * whole * C)), full_lse(static_cast<size_t>(B * H * whole));
  if (layout.kv_heads > 0)
    groupedAttentionForward<T>(full_out.data(), full_lse.data(), full.data(), B, whole, C, H, layout.kv_heads);
  else
    attentionForward<T>(full_out.data(), full_lse.data(), full.data(), B, whole, C, H);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t at = contextParallelPosition(t, Tn, place, cp);
      for (int64_t c = 0; c < C; ++c) out[(b * Tn + t) * C + c] = full_out[size_t((b * whole + at) * C + c)];
      for (int64_t h = 0; h < H; ++h) lse[(b * H + h) * Tn + t] = full_lse[size_t((b * H + h) * whole + at)];
    }
}

template <class T>
void contextParallelAttentionBackward(T* dqkv, T* dgathered, const T* dout, const T* qkv, const T* out, const T* lse,
                                      const T* gathered, int64_t B, int64_t Tn, const AttentionLayout& layout,
                                      int place, int cp, bool accumulate) {
  const KvColumns columns(layout);
  const int64_t whole = Tn * cp, C = layout.C, H = layout.H, W = layout.rowWidth(), KW = layout.kvWidth();
  const std::vector<T> full = wholeSequence(qkv, gathered, B, Tn, layout, columns, place, cp);
  // Other ranks' queries: zero query, output and output gradient, and a
  // log-sum-exp of 0, so each of their scores (0) has probability 1 and
  // every gradient term they would add is a product with a zero.
  const std::vector<T> full_out = spreadRows(out, B, Tn, C, place, cp);
  const std::vector<T> full_dout = spreadRows(dout, B, Tn, C, place, cp);
  const std::vector<T> full_lse = spreadLse(lse, B, H, Tn, place, cp);
  std::vector<T> dfull(static_cast<size_t>(B * whole * W));
  if (layout.kv_heads > 0)
    groupedAttentionBackward<T>(dfull.data(), full_dout.data(), full.data(), full_out.data(), full_lse.data(), B,
                                whole, C, H, layout.kv_heads, false);
  else
    attentionBackward<T>(dfull.data(), full_dout.data(), full.data(), full_out.data(), full_lse.data(), B, whole, C,
                         H, false);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const T* src = dfull.data() + (b * whole + contextParallelPosition(t, Tn, place, cp)) * W;
      T* dst = dqkv + (b * Tn + t) * W;
      for (int64_t w = 0; w < W; ++w) {
        if (columns.is_kv[size_t(w)]) {
          if (!accumulate) dst[w] = T(0);
        } else {
          dst[w] = accumulate ? T(dst[w] + src[w]) : src[w];
        }
      }
    }
  for (int r = 0; r < cp; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tn; ++t) {
        const T* src = dfull.data() + (b * whole + contextParallelPosition(t, Tn, r, cp)) * W;
        T* dst = dgathered + ((int64_t(r) * B + b) * Tn + t) * KW;
        for (int64_t i = 0; i < KW; ++i) dst[i] = src[columns.of_packed[size_t(i)]];
      }
}

#define TANDEM_INSTANTIATE_CONTEXT_PARALLEL(T)                                                                   \
  template void packKv<T>(T*, const T*, int64_t, const AttentionLayout&);                                       \
  template void packKvBackward<T>(T*, const T*, int64_t, const AttentionLayout&, bool);                         \
  template void contextParallelAttentionForward<T>(T*, T*, const T*, const T*, int64_t, int64_t,                \
                                                   const AttentionLayout&, int, int);                           \
  template void contextParallelAttentionBackward<T>(T*, T*, const T*, const T*, const T*, const T*, const T*,   \
                                                    int64_t, int64_t, const AttentionLayout&, int, int, bool);

TANDEM_INSTANTIATE_CONTEXT_PARALLEL(float)
TANDEM_INSTANTIATE_CONTEXT_PARALLEL(double)
#undef TANDEM_INSTANTIATE_CONTEXT_PARALLEL

}  // namespace tandem::cpu
