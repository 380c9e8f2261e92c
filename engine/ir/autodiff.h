#pragma once
// Reverse-mode differentiation of the graph IR: one backward rule per forward
// op (autodiff.cpp). Gradient contributions follow llm.c's convention: the
// first contribution to a gradient writes it, later ones add into it
// (OpAttrs::accumulate / accumulate_params), and a residual Add passes its
// output gradient to both inputs by aliasing the same tensor, so the residual
// stream's gradient is one buffer per micro-batch.

#include <vector>

#include "engine/ir/graph.h"

namespace tandem {

// Tracks which gradients exist, across the micro-batches of a step:
// parameter gradients are shared by every micro-batch (later ones add),
// activation gradients belong to their micro-batch.
class GradientState {
 public:
  explicit GradientState(const Graph& g);
  // Which tensor receives the gradient of `t`, creating it when needed.
  // `accumulate` tells whether the contribution must add into it.
  int contributionTarget(Graph& g, int t, bool& accumulate);
  int gradOf(int t) const;  // -1 when none yet
  void alias(int t, int grad);
  // The next contribution to each parameter gradient writes it instead of
  // adding (a micro-batch whose gradients are reduced on their own).
  void restartParameterGradients();
  void ensureSize(const Graph& g);

 private:
  std::vector<int> grad_;          // tensor id -> gradient tensor id
  std::vector<char> param_written_;  // param tensor id -> has a contribution
  std::vector<int> param_grad_;      // param tensor id -> its gradient tensor
};

// Appends the backward of the forward nodes [first, last) of one micro-batch.
// `losses` is the per-token loss tensor; loss_scale the dloss of each token.
void emitBackward(Graph& g, GradientState& grads, size_t first, size_t last, int losses,
                  double loss_scale);

}  // namespace tandem
