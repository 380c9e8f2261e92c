#pragma once
// Recompute pass: per layer, the policy names which forward activations are
// not kept for the backward; they are recomputed (phase `recompute`) right
// before their first backward use, from the activations that are kept.
//
//   none       keep everything the backward reads
//   selective  drop the cheap-to-recompute outputs: both LayerNorm outputs and
//              the GELU output (the largest activation of a block)
//   full       keep only the block's input; recompute the whole block

#include <string>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// True when `role` is dropped under `policy`.
bool recomputeDrops(RecomputePolicy policy, const std::string& role);

void applyRecompute(Graph& g, const JobSpec& job);

}  // namespace tandem
