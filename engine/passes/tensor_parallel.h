#pragma once
// Tensor parallelism (Megatron-LM's split of a transformer block;
// parallel.tensor_parallel ranks per group, blocks of consecutive ranks).
//
// Each block's QKV projection and MLP input layer are column-parallel: a
// rank holds the rows of its 1/p of the heads (of the query, key and value
// blocks each) and of the MLP's hidden units, so attention and GELU run on
// its own slice with no communication. The two output projections are
// row-parallel: a rank multiplies its slice of the input by its columns of
// the weight, and the partial products are summed by an all-reduce over
// the group ("g" in the Megatron paper), emitted by the model builder
// (model_gpt2.cpp) with the bias added by the group's first rank alone.
// In the backward, the gradient of a column-parallel layer's input (a
// LayerNorm's output, which every rank holds whole) is the sum of the
// ranks' partial gradients ("f"): this pass adds that all-reduce after each
// such layer's data-gradient matmul. The embedding, LayerNorms and LM head
// are computed whole on every rank (the same values), so their gradients
// need no tensor-parallel reduction; the gradient norm sums the slices'
// squares over the group (appendOptimizer).
//
// The collectives run on the compute stream: the next task needs their
// result, as in Megatron-LM without communication overlap.

#include "engine/ir/graph.h"
#include "engine/plan/plan.h"
#include "engine/spec/job.h"

namespace tandem {

// A summing all-reduce over the rank's tensor-parallel group ("tp").
CollectiveInfo tensorParallelCollective(int64_t count, DType dt);

// After autodiff: the all-reduce of every column-parallel layer's input
// gradient, right after the matmul that writes it.
void applyTensorParallelBackward(Graph& g, const JobSpec& job);

// Sequence parallelism (parallel.sequence_parallel): each norm's backward
// (LayerNorm, RMSNorm) sees the rank's tokens alone, so the gradients of its
// weight and bias (and of a linear bias whose gradient it sums,
// pass_bias_grad.h) are partial sums; a summing all-reduce over "tp" completes each, on the
// communication stream, after the last task that writes it. After the bias
// gradient fusion, before the gradient buckets (whose reductions follow it).
void applySequenceParallelGradientSum(Graph& g, const JobSpec& job);

}  // namespace tandem
