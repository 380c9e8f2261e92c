#include "engine/passes/bias_grad.h"

#include <algorithm>

namespace tandem {

namespace {

bool writes(const Node& n, int tensor) {
  return std::find(n.outputs.begin(), n.outputs.end(), tensor) != n.outputs.end();
}

// The node that will sum the bias gradient of MatmulBwdWeight node `i`, or -1.
int neighbourFor(const Graph& g, size_t i) {
  const Node& w = g.nodes[i];
  const int dy = w.inputs[0];
  // The last writer of dy before the weight GEMM: an attention backward that
  // overwrites it.
  for (size_t j = i; j-- > 0;) {
    const Node& n = g.nodes[j];
    if (!writes(n, dy)) continue;
    if (n.op == OpKind::AttentionBwd && n.outputs.size() == 1 && n.outputs[0] == dy && !n.attrs.accumulate)
      return int(j);
    break;
  }
  // The next writer of dy after it: a layernorm backward that adds to it.
  for (size_t j = i + 1; j < g.nodes.size(); ++j) {
    const Node& n = g.nodes[j];
    if (!writes(n, dy)) continue;
    if (n.op == OpKind::LayerNormBwd && n.outputs.size() == 3 && n.outputs[0] == dy && n.attrs.accumulate)
      return int(j);
    break;
  }
  return -1;
}

}  // namespace

int applyBiasGradientFusion(Graph& g, const JobSpec& job) {
  if (!job.schedule.fuse_bias_gradients) return 0;
  int moved = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& w = g.nodes[i];
    if (w.op != OpKind::MatmulBwdWeight || !w.attrs.has_bias || w.outputs.size() != 2) continue;
    const int at = neighbourFor(g, i);
    if (at < 0) continue;
    Node& n = g.nodes[size_t(at)];
    const int db = w.outputs[1];
    // A layernorm backward has one accumulate flag for all its parameter
    // gradients; an attention backward has none of its own.
    const bool flags_agree =
        n.op == OpKind::AttentionBwd || n.attrs.accumulate_params == w.attrs.accumulate_params;
    if (n.attrs.bias_grad || !flags_agree || g.tensor(db).dtype != g.tensor(w.inputs[0]).dtype) continue;
    n.outputs.push_back(db);
    n.attrs.bias_grad = true;
    if (n.op == OpKind::AttentionBwd) n.attrs.accumulate_params = w.attrs.accumulate_params;
    w.outputs.pop_back();
    w.attrs.has_bias = false;
    ++moved;
  }
  return moved;
}

}  // namespace tandem
