#pragma once
// Recompute pass: per layer, the policy names which forward activations are
// not kept for the backward; they are recomputed (phase `recompute`) right
// before their first backward use, from the activations that are kept.
//
//   none       keep everything the backward reads
//   selective  drop the cheap-to-recompute outputs: both LayerNorm outputs and
//              the GELU output (the largest activation of a block)
//   full       keep only the block's input; recompute the whole block
//   attention  Megatron-LM's selective recompute: drop the attention core's
//              output and probabilities (or log-sum-exp), re-run the
//              attention from the kept QKV; with a materialized score
//              matrix (schedule.materialized_attention) that saves the
//              largest activation of a block

#include <string>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// True when `role` is dropped under `policy`.
bool recomputeDrops(RecomputePolicy policy, const std::string& role);

void applyRecompute(Graph& g, const JobSpec& job);

}  // namespace tandem
