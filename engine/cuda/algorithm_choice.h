#pragma once
// Which of several timed algorithms to keep (GEMM algorithm timing,
// Gemm::setTuning). Header-only and free of CUDA so that the rule is unit
// tested on machines without a GPU.

#include <cstddef>
#include <vector>

namespace tandem::cuda {

// ms[i]: measured time of candidate i; index 0 is the library's first
// choice; a time <= 0 means the candidate could not run. Returns the fastest
// candidate, except that the first choice is kept when it ran and the
// fastest beats it by less than `margin` (a fraction): timing noise must not
// decide between near-equal algorithms. Returns 0 when nothing ran.
inline int chooseAlgorithm(const std::vector<double>& ms, double margin) {
  int best = -1;
  for (size_t c = 0; c < ms.size(); ++c)
    if (ms[c] > 0 && (best < 0 || ms[c] < ms[size_t(best)])) best = int(c);
  if (best < 0) return 0;
  if (ms[0] > 0 && ms[size_t(best)] >= ms[0] * (1.0 - margin)) return 0;
  return best;
}

}  // namespace tandem::cuda
