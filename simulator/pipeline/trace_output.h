#pragma once
// Writes a simulation into the trace store as a run of kind `simulated`, with
// the same rows a real profile has (streams, activities carrying plan task
// ids, steps, collectives, plan tasks with their dependencies, memory
// counters, the plan facts: recompute decisions with their simulated time,
// memory, the plan) plus the topology's name and text and link utilization
// counters for the topology view.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"
#include "traces/store/trace_writer.h"

namespace tandem::sim {

struct SimTraceOptions {
  std::string run_name;          // default: the job's name + " (simulated)"
  // Ranks simulated through a representative get their representative's
  // timeline copied while the world has at most this many ranks; above it
  // only simulated ranks are written (a stat says how many were left out).
  int replicate_up_to = 256;
  bool link_counters = true;
  // Written with the run: what the simulation warned about
  // (calibration_warnings.h).
  std::vector<traces::StatRow> stats;
};

// Appends one run; returns its id. No wall clock is read: the same inputs
// give the same rows.
int64_t writeSimulationTrace(traces::TraceWriter& writer, const Plan& plan, const Topology& topo,
                             const SimResult& result, const SimTraceOptions& options = {});

}  // namespace tandem::sim
