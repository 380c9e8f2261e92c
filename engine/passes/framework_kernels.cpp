#include "engine/passes/framework_kernels.h"

#include <algorithm>

namespace tandem {

bool eagerRunsAsChain(OpKind op) {
  switch (op) {
    case OpKind::RmsNorm:
    case OpKind::RmsNormBwd:
    case OpKind::SwiGlu:
    case OpKind::SwiGluBwd:
    case OpKind::SquaredRelu:
    case OpKind::SquaredReluBwd:
    case OpKind::CrossEntropy:
    case OpKind::CrossEntropyBwd:
    case OpKind::Attention:
    case OpKind::AttentionBwd: return true;
    default: return false;
  }
}

std::vector<int64_t> separateProjections(const Node& n, const JobSpec& job) {
  if (n.op != OpKind::Matmul && n.op != OpKind::MatmulBwdData && n.op != OpKind::MatmulBwdWeight) return {};
  const ModelSpec& m = job.model;
  const int64_t tp = std::max(1, job.parallel.tensor_parallel);
  if (n.name.find(".attn.qkv.") != std::string::npos) {
    const int64_t width = m.hidden / m.heads, kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
    const int64_t q = m.heads * width / tp, k = kv * width / tp;
    if (q + 2 * k == n.attrs.n) return {q, k, k};
  }
  const bool gated = m.family == ModelFamily::Llama && m.mlp_activation == MlpActivation::SwiGlu;
  if (gated && n.name.find(".mlp.fc.") != std::string::npos && n.attrs.n % 2 == 0)
    return {n.attrs.n / 2, n.attrs.n / 2};
  return {};
}

void markFrameworkKernels(Graph& g, const JobSpec& job) {
  const bool flash2 = job.schedule.attention_kernel == AttentionKernel::Flash2;
  const bool eager = job.schedule.elementwise == ElementwiseKernels::Eager;
  const bool separate = job.schedule.projections == Projections::Separate;
  if (!flash2 && !eager && !separate) return;
  for (Node& n : g.nodes) {
    const bool attention = n.op == OpKind::Attention || n.op == OpKind::AttentionBwd;
    if (flash2 && attention) n.attrs.flash2 = true;
    if (eager && eagerRunsAsChain(n.op)) n.attrs.eager = true;
    if (separate) n.attrs.parts = separateProjections(n, job);
  }
}

}  // namespace tandem
