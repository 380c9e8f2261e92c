#include "simulator/cost/calibration_warnings.h"

#include <fmt/format.h>

#include <set>

#include "engine/ir/kernel_revisions.h"
#include "simulator/cost/calibration_coverage.h"
#include "simulator/cost/calibration_device.h"
#include "traces/trackers/stats.h"

namespace tandem::sim {

namespace {

// The op kinds the plan runs whose kernels changed since the calibration
// measured them (engine/ir/kernel_revisions.h): "rmsnorm_bwd (revision 1
// measured, 2 in this build)", in op order, and how many tasks take them.
std::optional<std::string> staleKernelsWarning(const Plan& plan, const Calibration& cal, int* tasks) {
  std::set<OpKind> used;
  *tasks = 0;
  for (const RankPlan& rp : plan.programs)
    for (const Task& t : rp.tasks) {
      if (!cal.ops.count(t.op) || cal.kernelRevisionMeasured(t.op) == kernelRevision(t.op)) continue;
      used.insert(t.op);
      ++*tasks;
    }
  if (used.empty()) return std::nullopt;
  std::string kinds;
  for (OpKind op : used)
    kinds += fmt::format("{}{} (revision {} measured, {} in this build)", kinds.empty() ? "" : ", ", toString(op),
                         cal.kernelRevisionMeasured(op), kernelRevision(op));
  return fmt::format("the calibration measured older kernels of {}: their times may be off; measure them again "
                     "(`tandem calibrate --sweep`)",
                     kinds);
}

}  // namespace

CalibrationWarnings calibrationWarnings(const Plan& plan, const Topology& topo, const Calibration& cal,
                                        const RooflineCostModel& cost, bool with_sources) {
  CalibrationWarnings w;
  if (auto mismatch = calibrationGpuMismatch(cal, topo)) {
    w.lines.push_back(*mismatch);
    w.stats.push_back(traces::stats::kSimCalibrationGpuMismatch.row(1, *mismatch));
  }
  int stale_tasks = 0;
  if (auto stale = staleKernelsWarning(plan, cal, &stale_tasks)) {
    w.lines.push_back(*stale);
    w.stats.push_back(traces::stats::kSimCalibrationStaleKernels.row(stale_tasks, *stale));
  }
  const DeviceSpec& device = topo.devices.at(0);
  const CalibrationCoverage coverage = calibrationCoverage(plan, cost, device);
  if (auto line = calibrationCoverageWarning(coverage)) {
    w.lines.push_back(*line);
    w.stats.push_back(traces::stats::kSimCalibrationUnmeasuredTasks.row(coverage.op_kind_fit, *line));
  }
  if (with_sources)
    w.kernel_time_sources = calibrationCoverageSummary(
        coverage, neighbourReadAccuracy(coverage, cost, device, plan.job.training.precision));
  return w;
}

}  // namespace tandem::sim
