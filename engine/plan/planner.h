#pragma once
// The planner: job spec -> Plan. Builds the graph IR of one training step,
// differentiates it, runs the passes (recompute, gradient accumulation, data
// parallel buckets, streams and events, memory plan) and lowers the result to
// per-rank task lists.

#include "engine/plan/plan.h"
#include "engine/spec/job.h"

namespace tandem {

// Throws SpecError when the job cannot be planned (it has been validated
// already, so this only happens for limits of the planner itself).
Plan buildPlan(const JobSpec& job);

}  // namespace tandem
