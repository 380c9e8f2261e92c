#include "simulator/cost/calibration_warnings.h"

#include "simulator/cost/calibration_coverage.h"
#include "simulator/cost/calibration_device.h"
#include "traces/trackers/stats.h"

namespace tandem::sim {

CalibrationWarnings calibrationWarnings(const Plan& plan, const Topology& topo, const Calibration& cal,
                                        const RooflineCostModel& cost, bool with_sources) {
  CalibrationWarnings w;
  if (auto mismatch = calibrationGpuMismatch(cal, topo)) {
    w.lines.push_back(*mismatch);
    w.stats.push_back(traces::stats::kSimCalibrationGpuMismatch.row(1, *mismatch));
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
