#pragma once
// Lowering: graph IR -> RankPlan. Assigns streams, inserts the events that
// order cross-stream hazards (read-after-write, write-after-read,
// write-after-write on the same memory), attaches cost facts, and runs the
// memory planner.

#include <vector>

#include "engine/graph.h"
#include "engine/job.h"
#include "engine/plan.h"

namespace tandem {

RankPlan lowerGraph(const Graph& g, std::vector<int> ranks);

}  // namespace tandem
