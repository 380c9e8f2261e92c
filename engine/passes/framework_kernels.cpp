#include "engine/passes/framework_kernels.h"

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

void markFrameworkKernels(Graph& g, const JobSpec& job) {
  const bool flash2 = job.schedule.attention_kernel == AttentionKernel::Flash2;
  const bool eager = job.schedule.elementwise == ElementwiseKernels::Eager;
  if (!flash2 && !eager) return;
  for (Node& n : g.nodes) {
    const bool attention = n.op == OpKind::Attention || n.op == OpKind::AttentionBwd;
    if (flash2 && attention) n.attrs.flash2 = true;
    if (eager && eagerRunsAsChain(n.op)) n.attrs.eager = true;
  }
}

}  // namespace tandem
