#pragma once
// Recompute pass: per layer, the policy names which forward activations are
// not kept for the backward; they are recomputed (phase `recompute`) right
// before their first backward use, from the activations that are kept.
//
//   none       keep everything the backward reads
//   selective  drop the cheap-to-recompute outputs: both LayerNorm outputs and
//              the GELU output (the largest activation of a block)
//   full       keep only the block's input; recompute the whole block: every
//              forward op of it runs again before its backward (Megatron-LM's
//              checkpoint), also those whose outputs no backward reads
//   attention  Megatron-LM's selective recompute: drop the attention core's
//              output and probabilities (or log-sum-exp), re-run the
//              attention from the kept QKV; with a materialized score
//              matrix (schedule.materialized_attention) that saves the
//              largest activation of a block
//   alternate_gemms  torchtitan's per-op selective checkpointing: of a
//              block's GEMMs in forward order every other output is kept
//              (the first, third, ...: QKV and the MLP's input layer) and
//              every other dropped (the output projections), the
//              attention's outputs and a reduce-scatter's kept, everything
//              else dropped (norms, the activation, the residual sum after
//              the attention, sequence parallelism's all-gathers). The
//              backward's demand decides what reruns: the attention's
//              output projection (the residual sum the second norm's
//              backward reads is made from it, unless a reduce-scatter
//              made what the sum reads), the cheap ops, and the norms'
//              all-gathers under sequence parallelism.
//              torchtitan's separate q, k, v and gate/up GEMMs make its
//              alternation recompute the k and up projections too: with
//              schedule.projections separate they rerun as GEMMs of their
//              width (tandem's fused QKV and gate|up outputs stay kept).

#include <string>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// True when an activation of `role`, made by an op of kind `producer`, is
// dropped under `policy`.
bool recomputeDrops(RecomputePolicy policy, const std::string& role, OpKind producer);

void applyRecompute(Graph& g, const JobSpec& job);

}  // namespace tandem
