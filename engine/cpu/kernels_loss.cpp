// Softmax cross-entropy over the vocabulary, forward and backward.
//
// Each row is shifted by its maximum before exponentiating, and the sum of
// exponentials is kept in double whatever T is: with a large vocabulary the
// sum of many small terms in float would lose the tail of the distribution.

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/cpu/kernels.h"

namespace tandem::cpu {
namespace {

void checkTarget(int32_t target, int64_t row, int64_t V) {
  if (target < 0 || target >= V) {
    throw std::runtime_error("cross-entropy: target " + std::to_string(target) + " of row " +
                             std::to_string(row) + " is outside the vocabulary [0, " +
                             std::to_string(V) + ")");
  }
}

struct RowStats {
  double max;
  double sum_exp;  // sum_j exp(logit_j - max)
};

template <class T>
RowStats rowStats(const T* row, int64_t V) {
  double max = double(row[0]);
  // A NaN logit never becomes the max, but it still poisons the sum below.
  for (int64_t j = 1; j < V; ++j) max = double(row[j]) > max ? double(row[j]) : max;
  double sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - max);
  return {max, sum};
}

}  // namespace

template <class T>
void crossEntropyForward(T* losses, const T* logits, const int32_t* targets, int64_t M, int64_t V) {
  for (int64_t m = 0; m < M; ++m) {
    checkTarget(targets[m], m, V);
    const T* row = logits + m * V;
    const RowStats s = rowStats(row, V);
    // -log softmax[target] = log(sum_j exp(l_j - max)) - (l_target - max); the
    // shifted difference is formed first so large logits do not cancel.
    losses[m] = T(std::log(s.sum_exp) - (double(row[targets[m]]) - s.max));
  }
}

// The row statistics are taken before the row is overwritten, and each element
// is read before it is written, so dlogits may be logits itself.
template <class T>
void crossEntropyBackward(T* dlogits, const T* logits, const int32_t* targets, int64_t M,
                          int64_t V, double scale) {
  for (int64_t m = 0; m < M; ++m) {
    checkTarget(targets[m], m, V);
    const T* row = logits + m * V;
    const RowStats s = rowStats(row, V);
    const double inv_sum = 1.0 / s.sum_exp;
    T* d_row = dlogits + m * V;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(double(row[j]) - s.max) * inv_sum;
      d_row[j] = T(scale * (p - (j == targets[m] ? 1.0 : 0.0)));
    }
  }
}

#define TANDEM_INSTANTIATE_LOSS(T)                                                                \
  template void crossEntropyForward<T>(T*, const T*, const int32_t*, int64_t, int64_t);         \
  template void crossEntropyBackward<T>(T*, const T*, const int32_t*, int64_t, int64_t, double);

TANDEM_INSTANTIATE_LOSS(float)
TANDEM_INSTANTIATE_LOSS(double)
#undef TANDEM_INSTANTIATE_LOSS

}  // namespace tandem::cpu
