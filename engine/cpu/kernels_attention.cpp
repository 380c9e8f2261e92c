// Causal multi-head self-attention, streamed one query row at a time.
//
// For each (batch, head) the keys (and, in the backward, the values) are
// copied once into a [D, Tn] transposed panel, so the scores of one query row
// are built by adding q[d] * Kt[d, 0..t] for d = 0..D-1: contiguous and
// vectorisable, with each score still summed in ascending d like a plain dot
// product. Only one row of scores (Tn values) exists at a time; the backward
// rebuilds the probabilities from q, k and the saved log-sum-exp.
//
// Dot products and the weighted sums of rows are in T (they are matmuls);
// the softmax statistics (max, sum of exponentials, log-sum-exp) and the
// rowsum(dout * out) term are in double.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"

namespace tandem::cpu {
namespace {

struct HeadShape {
  int64_t Tn;      // sequence length
  int64_t C;       // model width
  int64_t D;       // head width, C / H
  int64_t stride;  // 3C, distance between two tokens in qkv
};

HeadShape headShape(int64_t Tn, int64_t C, int64_t H) {
  if (H <= 0 || C % H != 0) {
    throw std::runtime_error("attention: width C = " + std::to_string(C) +
                             " is not a multiple of the number of heads H = " + std::to_string(H));
  }
  return {Tn, C, C / H, 3 * C};
}

// panel[d * Tn + s] = src[s * stride + d] for s < Tn, d < D.
template <class T>
void transposeHead(T* panel, const T* src, const HeadShape& hs) {
  for (int64_t s = 0; s < hs.Tn; ++s)
    for (int64_t d = 0; d < hs.D; ++d) panel[d * hs.Tn + s] = src[s * hs.stride + d];
}

// scores[s] = scale * sum_d q[d] * kt[d, s] for s in [0, count).
template <class T>
void rowScores(T* scores, const T* q, const T* kt, int64_t Tn, int64_t D, int64_t count, T scale) {
  for (int64_t s = 0; s < count; ++s) scores[s] = 0;
  for (int64_t d = 0; d < D; ++d) {
    const T qd = q[d];
    const T* k_row = kt + d * Tn;
    for (int64_t s = 0; s < count; ++s) scores[s] += qd * k_row[s];
  }
  for (int64_t s = 0; s < count; ++s) scores[s] *= scale;
}

}  // namespace

bool keptByDropout(uint64_t key, uint64_t index, double p) {
  // splitmix64's finalizer over the key and the index: every bit of both
  // reaches every bit of the result.
  uint64_t z = key ^ (index * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53 >= p;
}

template <class T>
void attentionForward(T* out, T* lse, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H, T* probs,
                      const AttentionDropout<T>* dropout) {
  if (dropout && !probs) throw std::logic_error("attention: dropout needs the materialized probabilities");
  const HeadShape hs = headShape(Tn, C, H);
  const int64_t D = hs.D;
  const T scale = T(1.0 / std::sqrt(double(D)));
  std::vector<T> kt(static_cast<std::size_t>(D * Tn));
  std::vector<T> scores(static_cast<std::size_t>(Tn));
  std::vector<double> weights(static_cast<std::size_t>(Tn));
  std::vector<T> multipliers(static_cast<std::size_t>(Tn));
  std::vector<T> acc(static_cast<std::size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    const T* seq = qkv + b * Tn * hs.stride;
    for (int64_t h = 0; h < H; ++h) {
      transposeHead(kt.data(), seq + C + h * D, hs);
      const T* v_head = seq + 2 * C + h * D;
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t count = t + 1;  // causal: keys 0..t
        rowScores(scores.data(), seq + t * hs.stride + h * D, kt.data(), Tn, D, count, scale);
        double max = double(scores[0]);
        // A NaN score never becomes the max, but it still poisons the sum below.
        for (int64_t s = 1; s < count; ++s) max = double(scores[s]) > max ? double(scores[s]) : max;
        // One exp per score: keep exp(score - max) and divide by the sum.
        double sum = 0;
        for (int64_t s = 0; s < count; ++s) {
          const double e = std::exp(double(scores[s]) - max);
          weights[std::size_t(s)] = e;
          sum += e;
        }
        lse[(b * H + h) * Tn + t] = T(max + std::log(sum));
        const double inv_sum = 1.0 / sum;
        const int64_t row_at = ((b * H + h) * Tn + t) * Tn;
        if (probs) {  // the materialized row: the probabilities, zero past the diagonal
          T* row = probs + row_at;
          for (int64_t s = 0; s < Tn; ++s) row[s] = s < count ? T(weights[std::size_t(s)] * inv_sum) : T(0);
        }
        // What multiplies V: the probabilities, or with dropout the kept
        // ones scaled.
        for (int64_t s = 0; s < count; ++s) multipliers[std::size_t(s)] = T(weights[std::size_t(s)] * inv_sum);
        if (dropout) {
          const double keep_scale = 1.0 / (1.0 - dropout->p);
          for (int64_t s = 0; s < Tn; ++s) {
            const bool kept = s < count && keptByDropout(dropout->key, uint64_t(row_at + s), dropout->p);
            dropout->mask[row_at + s] = kept ? 1 : 0;
            const T w = kept ? T(weights[std::size_t(s)] * inv_sum * keep_scale) : T(0);
            dropout->dropped[row_at + s] = w;
            if (s < count) multipliers[std::size_t(s)] = w;
          }
        }
        for (int64_t d = 0; d < D; ++d) acc[std::size_t(d)] = 0;
        for (int64_t s = 0; s < count; ++s) {
          const T p = multipliers[std::size_t(s)];
          const T* v_row = v_head + s * hs.stride;
          for (int64_t d = 0; d < D; ++d) acc[std::size_t(d)] += p * v_row[d];
        }
        T* out_row = out + (b * Tn + t) * C + h * D;
        for (int64_t d = 0; d < D; ++d) out_row[d] = acc[std::size_t(d)];
      }
    }
  }
}

// With S = scale * q k^T, P = softmax(S) (causal), out = P v:
//   dv_s = sum_t P_ts dout_t
//   dP_ts = dout_t . v_s
//   dS_ts = P_ts (dP_ts - sum_s' P_ts' dP_ts') = P_ts (dP_ts - dout_t . out_t)
//   dq_t = scale sum_s dS_ts k_s;  dk_s = scale sum_t dS_ts q_t
// The gradients of one (batch, head) are formed in scratch and then stored
// into (or added to) dqkv, so accumulate=true gives "old + fresh" exactly.
template <class T>
void attentionBackward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                       int64_t Tn, int64_t C, int64_t H, bool accumulate, const T* saved_probs,
                       const AttentionDropout<T>* dropout) {
  if (dropout && !saved_probs) throw std::logic_error("attention backward: dropout needs the saved probabilities");
  const HeadShape hs = headShape(Tn, C, H);
  const int64_t D = hs.D;
  const T scale = T(1.0 / std::sqrt(double(D)));
  std::vector<T> kt(static_cast<std::size_t>(D * Tn));
  std::vector<T> vt(static_cast<std::size_t>(D * Tn));
  std::vector<T> probs(static_cast<std::size_t>(Tn));
  std::vector<T> multipliers(static_cast<std::size_t>(Tn));  // what multiplied V in the forward
  std::vector<T> dscores(static_cast<std::size_t>(Tn));
  std::vector<T> dq(static_cast<std::size_t>(Tn * D));
  std::vector<T> dk(static_cast<std::size_t>(Tn * D));
  std::vector<T> dv(static_cast<std::size_t>(Tn * D));
  for (int64_t b = 0; b < B; ++b) {
    const T* seq = qkv + b * Tn * hs.stride;
    for (int64_t h = 0; h < H; ++h) {
      const T* q_head = seq + h * D;
      const T* k_head = seq + C + h * D;
      transposeHead(kt.data(), k_head, hs);
      transposeHead(vt.data(), seq + 2 * C + h * D, hs);
      std::fill(dq.begin(), dq.end(), T(0));
      std::fill(dk.begin(), dk.end(), T(0));
      std::fill(dv.begin(), dv.end(), T(0));
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t count = t + 1;
        const T* q_row = q_head + t * hs.stride;
        const T* dout_row = dout + (b * Tn + t) * C + h * D;
        const T* out_row = out + (b * Tn + t) * C + h * D;
        if (saved_probs) {  // materialized: the forward kept them
          const T* row = saved_probs + ((b * H + h) * Tn + t) * Tn;
          for (int64_t s = 0; s < count; ++s) probs[s] = row[s];
        } else {  // rebuild this row's probabilities from the saved log-sum-exp
          rowScores(probs.data(), q_row, kt.data(), Tn, D, count, scale);
          const double row_lse = double(lse[(b * H + h) * Tn + t]);
          for (int64_t s = 0; s < count; ++s) probs[s] = T(std::exp(double(probs[s]) - row_lse));
        }
        // dP_ts = dout_t . v_s, built like the scores (scale 1). With
        // dropout that is the gradient of the dropped probabilities, and
        // each kept one's probability gets it scaled; dv sums the dropped
        // ones. delta = dout_t . out_t is still sum_s P_ts dP_ts: out_t sums
        // the dropped probabilities' rows of v.
        rowScores(dscores.data(), dout_row, vt.data(), Tn, D, count, T(1));
        for (int64_t s = 0; s < count; ++s) multipliers[std::size_t(s)] = probs[std::size_t(s)];
        if (dropout) {
          const int64_t row_at = ((b * H + h) * Tn + t) * Tn;
          const T keep_scale = T(1.0 / (1.0 - dropout->p));
          for (int64_t s = 0; s < count; ++s) {
            multipliers[std::size_t(s)] = dropout->dropped[row_at + s];
            dscores[std::size_t(s)] = dropout->mask[row_at + s] ? T(dscores[std::size_t(s)] * keep_scale) : T(0);
          }
        }
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += double(dout_row[d]) * double(out_row[d]);
        for (int64_t s = 0; s < count; ++s)
          dscores[s] = T(double(probs[s]) * (double(dscores[s]) - delta)) * scale;
        T* dq_row = dq.data() + t * D;
        for (int64_t s = 0; s < count; ++s) {
          const T ds = dscores[s];
          const T p = multipliers[std::size_t(s)];
          const T* k_row = k_head + s * hs.stride;
          T* dk_row = dk.data() + s * D;
          T* dv_row = dv.data() + s * D;
          for (int64_t d = 0; d < D; ++d) {
            dq_row[d] += ds * k_row[d];
            dk_row[d] += ds * q_row[d];
            dv_row[d] += p * dout_row[d];
          }
        }
      }
      T* dseq = dqkv + b * Tn * hs.stride;
      for (int64_t t = 0; t < Tn; ++t) {
        T* dst_q = dseq + t * hs.stride + h * D;
        T* dst_k = dst_q + C;
        T* dst_v = dst_q + 2 * C;
        for (int64_t d = 0; d < D; ++d) {
          const std::size_t i = std::size_t(t * D + d);
          dst_q[d] = accumulate ? T(dst_q[d] + dq[i]) : dq[i];
          dst_k[d] = accumulate ? T(dst_k[d] + dk[i]) : dk[i];
          dst_v[d] = accumulate ? T(dst_v[d] + dv[i]) : dv[i];
        }
      }
    }
  }
}

#define TANDEM_INSTANTIATE_ATTENTION(T)                                                          \
  template void attentionForward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, T*,      \
                                    const AttentionDropout<T>*);                                   \
  template void attentionBackward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, bool, const T*, const AttentionDropout<T>*);

TANDEM_INSTANTIATE_ATTENTION(float)
TANDEM_INSTANTIATE_ATTENTION(double)
#undef TANDEM_INSTANTIATE_ATTENTION

}  // namespace tandem::cpu
