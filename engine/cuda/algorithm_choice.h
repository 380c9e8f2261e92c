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

// The whole step runs as one CUDA Graph, where every node a GEMM launch adds
// besides its kernel costs more than its own time: some cuBLASLt algorithms
// zero a 4-byte counter with a memset before their kernel, and in GPT-2
// 124M's graph on one H200 each such memset took 3.3 us from its start to
// the next kernel's start (99 per step at micro-batch 16), against about
// 0.4 us between two kernels. Eager timing does not see that, so each
// candidate's measured time (ms[i] > 0) is charged ms_per_node for each
// extra node of its launch (extra_nodes[i]) before chooseAlgorithm decides.
// Measured there: 14 of the 15 first choices add a memset, and 12 of the
// kept ones still do (the memset-free candidates are slower, also those
// cuBLASLt offers without a workspace); the step time did not move
// measurably. The counts are reported with the tuning totals.
inline std::vector<double> withGraphNodeCost(std::vector<double> ms, const std::vector<int>& extra_nodes,
                                             double ms_per_node) {
  for (size_t c = 0; c < ms.size() && c < extra_nodes.size(); ++c)
    if (ms[c] > 0 && extra_nodes[c] > 0) ms[c] += ms_per_node * extra_nodes[c];
  return ms;
}

}  // namespace tandem::cuda
