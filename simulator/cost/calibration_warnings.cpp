#include "simulator/cost/calibration_warnings.h"

#include "simulator/cost/calibration_coverage.h"
#include "simulator/cost/calibration_device.h"

namespace tandem::sim {

CalibrationWarnings calibrationWarnings(const Plan& plan, const Topology& topo, const Calibration& cal,
                                        const RooflineCostModel& cost) {
  CalibrationWarnings w;
  if (auto mismatch = calibrationGpuMismatch(cal, topo)) {
    w.lines.push_back(*mismatch);
    w.stats.push_back({"sim.calibration_gpu_mismatch", 1, traces::Severity::Warning, *mismatch});
  }
  const CalibrationCoverage coverage = calibrationCoverage(plan, cost, topo.devices.at(0));
  if (auto line = calibrationCoverageWarning(coverage)) {
    w.lines.push_back(*line);
    w.stats.push_back({"sim.calibration_unmeasured_tasks", coverage.op_kind_fit, traces::Severity::Warning, *line});
  }
  return w;
}

}  // namespace tandem::sim
