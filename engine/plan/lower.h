#pragma once
// Lowering: graph IR -> RankPlan. Assigns streams, inserts the events that
// order cross-stream hazards (read-after-write, write-after-read,
// write-after-write on the same memory), attaches cost facts, and runs the
// memory planner.

#include <vector>

#include "engine/ir/graph.h"
#include "engine/plan/plan.h"
#include "engine/spec/job.h"

namespace tandem {

struct LowerOptions {
  // Weight-gradient GEMMs on a second compute stream ("compute.wgrad",
  // job.schedule.weight_gradient_stream). Besides the waits the buffers ask
  // for, the compute stream joins each of them once `weight_gradient_lag`
  // later ones have been issued, which bounds how long their inputs stay
  // live. Lags 1 and 2 measured the same on one H200 (29.04 and 28.99 ms,
  // GPT-2 124M micro-batch 16); at 1 the join can fall on a GELU backward,
  // which keeps the fused DGELU GEMM from its early place (pass_fusion.h).
  bool weight_gradient_stream = false;
  int weight_gradient_lag = 2;
  // The compute stream joins every weight-gradient task issued so far
  // before each micro-batch's forward (not only the lagging ones): the
  // memory plan can then reuse what they wrote within the micro-batch
  // (gradients reduced every micro-batch, pass_micro_batch_reduce.h).
  bool join_side_stream_per_micro_batch = false;
};

RankPlan lowerGraph(const Graph& g, std::vector<int> ranks, const LowerOptions& opt = {});

}  // namespace tandem
