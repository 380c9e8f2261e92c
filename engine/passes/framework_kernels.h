#pragma once
// Marks the tasks another framework would run with other kernels
// (schedule.attention_kernel, schedule.elementwise): the same arithmetic,
// so both executors ignore the marks; the simulator times the marked tasks
// as that framework's kernels (simulator/cost/framework_kernels.h), and the
// GPU executor refuses such plans rather than time its own kernels under
// their names (engine/plan/gpu_support.h).
//
//   flash2  Attention and AttentionBwd
//   eager   the ops eager PyTorch runs as a chain of kernels: RMSNorm and
//           its backward, the SwiGLU and squared-ReLU activations and their
//           backwards, the loss (cross-entropy forward and backward), and
//           the attention's (rotary embedding on q and k, the output's
//           transpose to [tokens, heads x width]). A LayerNorm, GELU or
//           residual add is one kernel in eager PyTorch too: unmarked.
//   parts   (schedule.projections separate) the query/key/value GEMMs and
//           the gated MLP's gate/up GEMMs in all their roles: the widths
//           of the separate GEMMs the framework runs in their place

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// True when eager PyTorch runs `op` as more kernels than the fused plan.
bool eagerRunsAsChain(OpKind op);

// The parts of a fused projection GEMM node the framework runs separately
// (the query, key and value widths; the gate and up halves), or none.
std::vector<int64_t> separateProjections(const Node& n, const JobSpec& job);

void markFrameworkKernels(Graph& g, const JobSpec& job);

}  // namespace tandem
