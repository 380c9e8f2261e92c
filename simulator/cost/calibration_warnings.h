#pragma once
// What a simulation should say about its calibration: measured on another
// GPU than the topology's (calibration_device.h), or not at the plan's
// shapes (calibration_coverage.h). tandem simulate prints the lines on
// stderr and in --json, the GUI's what-if in its status line, and both keep
// them with the simulated run as warning stats (docs/trace-schema.md), so a
// trace read later still says what its step rests on.

#include <optional>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology.h"
#include "traces/store/trace_model.h"

namespace tandem::sim {

struct CalibrationWarnings {
  std::vector<std::string> lines;
  // "sim.calibration_gpu_mismatch" (1), "sim.calibration_stale_kernels" (the
  // kernel tasks of op kinds measured at an older kernel revision) and
  // "sim.calibration_unmeasured_tasks" (the kernel tasks outside the
  // measured shapes), severity warning, the line as description.
  std::vector<traces::StatRow> stats;
  // Where the step's kernel time comes from and how well the calibration
  // reads what it interpolates (calibrationCoverageSummary): not a warning,
  // said beside the calibration's name.
  std::optional<std::string> kernel_time_sources;
};

// `cost` is the model built from `cal`; nothing is said without a
// calibration. `with_sources`: also kernel_time_sources.
CalibrationWarnings calibrationWarnings(const Plan& plan, const Topology& topo, const Calibration& cal,
                                        const RooflineCostModel& cost, bool with_sources = false);

}  // namespace tandem::sim
