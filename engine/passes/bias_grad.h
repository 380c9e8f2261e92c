#pragma once
// Bias gradients summed where their input is already being read.
//
// A linear layer's bias gradient is the column sum of its output gradient
// dy, which its MatmulBwdWeight reads a second time for that sum alone (a
// separate memory-bound pass over B*T rows). Two neighbours touch the same
// dy anyway:
//
//   - the output projections of attention and MLP write into the residual
//     stream: their dy is the residual gradient, which the next layernorm
//     backward (ln1 / ln2 of the same block) adds its own contribution to.
//     Its kernel loads every row of dy before adding, so it sums the rows
//     it loaded (the value before its add, which is what the weight GEMM
//     read: nothing writes dy in between);
//   - the QKV projection's dy is the attention backward's output, which
//     that kernel writes tile by tile and can sum while it stores.
//
// The pass moves the bias gradient tensor from the MatmulBwdWeight node's
// outputs to the neighbour's (last output, attrs.bias_grad = true) and
// turns the MatmulBwdWeight's has_bias off. The work then runs on the
// neighbour's stream (the compute stream: the weight gradients' own stream
// is left with their GEMMs), and gradient buckets see the neighbour as the
// producer. Applies only where the result is the same sum: the layernorm
// backward accumulates into dy and is its next writer after the weight
// GEMM; the attention backward overwrites dy and is its last writer before;
// both share the bias gradient's accumulate flag and element type.
// job.schedule.fuse_bias_gradients turns it off.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// After autodiff and recompute, before gradient buckets. Returns the number
// of bias gradients moved.
int applyBiasGradientFusion(Graph& g, const JobSpec& job);

}  // namespace tandem
