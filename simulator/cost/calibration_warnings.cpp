#include "simulator/cost/calibration_warnings.h"

#include "simulator/cost/calibration_coverage.h"
#include "simulator/cost/calibration_device.h"
#include "traces/trackers/stats.h"

namespace tandem::sim {

CalibrationWarnings calibrationWarnings(const Plan& plan, const Topology& topo, const Calibration& cal,
                                        const RooflineCostModel& cost) {
  CalibrationWarnings w;
  if (auto mismatch = calibrationGpuMismatch(cal, topo)) {
    w.lines.push_back(*mismatch);
    w.stats.push_back(traces::stats::kSimCalibrationGpuMismatch.row(1, *mismatch));
  }
  const CalibrationCoverage coverage = calibrationCoverage(plan, cost, topo.devices.at(0));
  if (auto line = calibrationCoverageWarning(coverage)) {
    w.lines.push_back(*line);
    w.stats.push_back(traces::stats::kSimCalibrationUnmeasuredTasks.row(coverage.op_kind_fit, *line));
  }
  return w;
}

}  // namespace tandem::sim
