#pragma once
// Whether a simulated plan fits its GPUs' memory as `tandem run` counts it
// before it allocates (the arena, the executor's buffers and the reserve it
// keeps free: engine/memory/gpu_footprint.h). A what-if on a topology of smaller
// GPUs would otherwise report the step of a job that a real run refuses;
// the warning says by how much it is short and which recompute,
// micro-batch and LM head choices would fit (engine/memory/memory_fit.h).
// tandem simulate and the GUI's what-if print it and keep it with the
// simulated run as the warning stat `sim.memory_short_mib`.

#include <optional>
#include <string>
#include <vector>

#include "engine/memory/memory_fit.h"
#include "engine/plan/plan.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"
#include "traces/store/trace_model.h"

namespace tandem::sim {

struct MemoryShortfall {
  int rank = -1;               // the first rank whose device is shortest of memory
  std::string device_model;    // "H100", "H100 MIG 1g.10gb"
  int64_t device_bytes = 0;    // the device's memory
  int64_t arena_bytes = 0;     // its program's arena
  int64_t executor_bytes = 0;  // the executor's buffers beyond the arena
  int64_t needed_bytes = 0;    // arena, buffers and reserve
  int64_t shortBytes() const { return needed_bytes - device_bytes; }
};

// The rank that misses its device's memory by the most; nothing when every
// rank fits or no device of theirs states its memory.
std::optional<MemoryShortfall> memoryShortfall(const Plan& plan, const Topology& topo, const SimResult& result);

struct MemoryFitWarning {
  std::string line;
  traces::StatRow stat;  // sim.memory_short_mib, severity warning, the line as description
  std::vector<FittingChoice> choices;  // what fits the short device (engine/memory/memory_fit.h), as named in the line
};
// With suggest_choices false the line only states the shortfall (a sweep
// asks for the verdict of many plans; looking for the fitting choices plans
// the job again several times).
std::optional<MemoryFitWarning> memoryFitWarning(const Plan& plan, const Topology& topo, const SimResult& result,
                                                 bool suggest_choices = true);

}  // namespace tandem::sim
