#include "engine/cpu/kernels_vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::cpu {
namespace {

bool mine(int64_t token, int64_t first, int64_t rows) { return token >= first && token < first + rows; }

// The softmax's maximum and sum of exp(logit - maximum) over every rank's columns.
struct GlobalStats {
  double max = -std::numeric_limits<double>::infinity();
  double sum_exp = 0;
  double target_logit = 0;
};

GlobalStats combine(const float* gathered, int64_t M, int64_t ranks, int64_t m) {
  GlobalStats g;
  for (int64_t r = 0; r < ranks; ++r) g.max = std::max(g.max, double(gathered[(r * M + m) * 3]));
  for (int64_t r = 0; r < ranks; ++r) {
    const float* s = gathered + (r * M + m) * 3;
    g.sum_exp += double(s[1]) * std::exp(double(s[0]) - g.max);
    g.target_logit += double(s[2]);
  }
  return g;
}

}  // namespace

void vocabParallelEmbedding(float* out, const int32_t* tokens, const float* wte_rows, const float* wpe, int64_t B,
                            int64_t T, int64_t C, int64_t first, int64_t rows, bool add_position) {
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t token = tokens[bt];
    const float* row = mine(token, first, rows) ? wte_rows + (token - first) * C : nullptr;
    const float* pos = wpe && add_position ? wpe + (bt % T) * C : nullptr;
    float* o = out + bt * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (row ? row[c] : 0.0f) + (pos ? pos[c] : 0.0f);
  }
}

void vocabParallelEmbeddingBackward(float* dwte_rows, float* dwpe, const float* dout, const int32_t* tokens,
                                    int64_t B, int64_t T, int64_t C, int64_t first, int64_t rows,
                                    bool accumulate_wte, bool accumulate_wpe) {
  if (!accumulate_wte) std::fill(dwte_rows, dwte_rows + rows * C, 0.0f);
  if (dwpe && !accumulate_wpe) std::fill(dwpe, dwpe + T * C, 0.0f);
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t token = tokens[bt];
    const float* d = dout + bt * C;
    if (dwpe) {
      float* pos = dwpe + (bt % T) * C;
      for (int64_t c = 0; c < C; ++c) pos[c] += d[c];
    }
    if (!mine(token, first, rows)) continue;
    float* row = dwte_rows + (token - first) * C;
    for (int64_t c = 0; c < C; ++c) row[c] += d[c];
  }
}

void crossEntropyStats(float* stats, const float* logits, const int32_t* targets, int64_t M, int64_t first,
                       int64_t rows) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = logits + m * rows;
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < rows; ++j) max = std::max(max, double(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < rows; ++j) sum += std::exp(double(row[j]) - max);
    stats[m * 3] = float(max);
    stats[m * 3 + 1] = float(sum);
    stats[m * 3 + 2] = mine(targets[m], first, rows) ? row[targets[m] - first] : 0.0f;
  }
}

void vocabParallelCrossEntropy(float* losses, const float* gathered, int64_t M, int64_t ranks) {
  for (int64_t m = 0; m < M; ++m) {
    const GlobalStats g = combine(gathered, M, ranks, m);
    losses[m] = float(std::log(g.sum_exp) - (g.target_logit - g.max));
  }
}

void vocabParallelCrossEntropyBackward(float* logits, const int32_t* targets, const float* gathered, int64_t M,
                                       int64_t first, int64_t rows, int64_t ranks, double scale) {
  for (int64_t m = 0; m < M; ++m) {
    const GlobalStats g = combine(gathered, M, ranks, m);
    const double inv_sum = 1.0 / g.sum_exp;
    float* row = logits + m * rows;
    for (int64_t j = 0; j < rows; ++j) {
      const double p = std::exp(double(row[j]) - g.max) * inv_sum;
      row[j] = float(scale * (p - (first + j == targets[m] ? 1.0 : 0.0)));
    }
  }
}

}  // namespace tandem::cpu
