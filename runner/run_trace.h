#pragma once
// Where a real run's records go: each rank profiles into a file of its own
// (never several processes into one SQLite file), merged into the run's
// file at the end; a run without a profile appends its steps, throughput and
// memory as a run of their own. Both keep the plan's facts.

#include <string>
#include <vector>

#include "engine/cuda/executor.h"
#include "engine/plan/plan.h"
#include "runner/rank_session.h"
#include "traces/store/merge.h"

namespace tandem::runner {

// RUN.sqlite -> RUN.rank3.sqlite: the rank's profile, kept for `tandem merge`.
std::string rankTracePath(const std::string& out, int rank);

// Merges the ranks' profiles into `out` (appended as one run; written whole
// or not at all).
traces::MergeResult mergeProfiles(const std::string& out, int world);

// Appends a run of the steps' times, the steady-state figures, the memory
// report and the placement, if one chose the GPUs, to `path` (written whole
// or not at all).
void writeStepsRun(const std::string& path, const Plan& plan, int device,
                   const std::vector<cuda::GpuStepResult>& steps, const cuda::GpuMemoryReport& memory,
                   const StepStats& stats, const RunPlacement& placement = {});

}  // namespace tandem::runner
