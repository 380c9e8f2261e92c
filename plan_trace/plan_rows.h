#pragma once
// A rank's plan as the trace store keeps it: one PlanTaskRow per task, with
// the dependencies every kind of run stores (the previous task on the same
// stream, and the recorder of each event the task waits for). The
// simulator's trace output and the profiler's plan observer both write these
// rows, so a real run and its simulation carry the same graph by
// construction (`tandem compare` matches their tasks by id).

#include <vector>

#include "engine/plan/plan.h"
#include "traces/store/trace_model.h"

namespace tandem::plan_trace {

std::vector<traces::PlanTaskRow> planTaskRows(int rank, const RankPlan& rp);

// Arena bytes live at each task index: every top-level buffer (views share
// their parent's bytes) from its first to its last use; persistent ones always.
std::vector<int64_t> arenaLiveBytes(const RankPlan& rp);

}  // namespace tandem::plan_trace
