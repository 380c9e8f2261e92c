#pragma once
// The LM head and its cross-entropy in groups of tokens.
//
// The LM head's logits, [tokens, vocab], are the largest activation of a
// GPT step (1.65 GB in bf16 for GPT-2 124M at micro-batch 16, a fifth of
// its arena), and the cross-entropy over them is memory-bound work that
// runs alone between compute-bound GEMMs. With schedule.lm_head_chunks = K
// this pass splits the five LM-head nodes of each micro-batch (the matmul,
// the cross-entropy, its backward writing dlogits in place, the data
// gradient and the weight gradient) into K groups over consecutive rows of
// the micro-batch's tokens, issued group after group:
//
//   for c in 0 .. K-1:  matmul_c, cross_entropy_c, cross_entropy_bwd_c,
//                       bwd_data_c, bwd_weight_c
//
// Each group's logits are a tensor of their own ([tokens / K, vocab]), so
// the memory plan gives a later group the space of an earlier one. The
// group reads row views of the final layernorm's output and of the targets,
// writes row views of the per-token losses and of the layernorm output's
// gradient, and adds its weight gradient into the LM head weight's (the
// first group keeps the original node's accumulate flag, the others add).
// With the weight-gradient stream, group c's weight GEMM runs beside group
// c + 1's matmul and cross-entropy, so the cross-entropy no longer runs
// alone. On one H200 that overlap did not pay for the smaller kernels (8
// groups: 0.6-0.9 ms more per GPT-2 124M step, docs/benchmarks.md): this is
// a memory lever, off by default.
//
// Every row is computed as before; only the weight gradient becomes a sum
// of K partial products (in bf16 jobs rounded to bf16 after each, as with
// gradient accumulation over micro-batches). Applies where the five nodes
// follow one another as autodiff emits them; elsewhere the graph is
// unchanged.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// After autodiff, before recompute and gradient buckets. Returns the number
// of LM heads split (one per micro-batch), 0 when lm_head_chunks is 1.
// Throws std::invalid_argument when a micro-batch's tokens do not split
// into lm_head_chunks equal groups (job validation refuses such jobs).
int applyLmHeadChunks(Graph& g, const JobSpec& job);

}  // namespace tandem
