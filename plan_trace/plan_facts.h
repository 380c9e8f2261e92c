#pragma once
// The facts of a Plan that a run keeps beside its activities
// (docs/trace-schema.md, "Plan facts"): the per-layer recompute decisions,
// the memory plan of each rank program and the whole plan, encoded. They are
// written once, where the plan is known (the simulator's trace output, the
// rank runner of `tandem run`), and read back by whoever explains the run
// (the GUI's recompute view, `tandem calibrate`), so a run shows the
// decisions it was planned with even after the planner changed.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "engine/plan/plan.h"
#include "traces/store/trace_model.h"

namespace tandem::traces {
class TraceReader;
}

namespace tandem::plan_trace {

// Time spent recomputing each layer per step on rank 0 (layer -> ns), where
// the run timed it (a simulation); empty otherwise.
using LayerTimes = std::map<int, int64_t>;

// The rows a run stores for `plan`: recompute decisions (with their time
// where given), one memory row per rank program, and the plan encoded.
traces::PlanFacts planFacts(const Plan& plan, const LayerTimes& recompute_ns = {});

// The plan a run stored; nullopt when it stored none (a run written before
// trace schema 2, or an imported trace). Throws TraceError naming the file
// and run when the stored plan cannot be decoded or read.
std::optional<Plan> storedPlan(traces::TraceReader& reader, int64_t run);

// The plan to explain a run with: the one it stored or, for a run written
// before plans were stored, its job planned by this tandem, with `note`
// saying so (the planner may have changed since). Throws TraceError when the
// run carries no job and no plan.
Plan planOfRun(traces::TraceReader& reader, int64_t run, std::string* note = nullptr);

// The plan's encoding in run_plans: its JSON (docs/plan-format.md),
// zlib-compressed. Exposed for the tests.
inline constexpr std::string_view kPlanEncoding = "json+zlib";
std::string encodePlan(const Plan& plan);
Plan decodePlan(const std::string& blob, const std::string& where);

}  // namespace tandem::plan_trace
