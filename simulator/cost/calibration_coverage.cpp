#include "simulator/cost/calibration_coverage.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::sim {

CalibrationCoverage calibrationCoverage(const Plan& plan, const RooflineCostModel& cost, const DeviceSpec& device) {
  CalibrationCoverage c;
  const Precision precision = plan.job.training.precision;
  for (const RankPlan& rp : plan.programs)
    for (const Task& t : rp.tasks) {
      const auto [ns, source] = cost.taskTime(t, device, precision);
      if (source == TimeSource::NoKernel) continue;
      ++c.kernel_tasks;
      c.kernel_ns += ns;
      if (source == TimeSource::OpKindFit) c.op_kind_fit_ns += ns;
      switch (source) {
        case TimeSource::Measured: ++c.measured; break;
        case TimeSource::Interpolated: ++c.interpolated; break;
        case TimeSource::Roofline: ++c.roofline; break;
        case TimeSource::OpKindFit: {
          ++c.op_kind_fit;
          const std::string shape = fmt::format("{} {}", toString(costOpKind(t)), shapeKey(t));
          if (std::find(c.unmeasured_shapes.begin(), c.unmeasured_shapes.end(), shape) == c.unmeasured_shapes.end())
            c.unmeasured_shapes.push_back(shape);
          break;
        }
        case TimeSource::NoKernel: break;
      }
    }
  return c;
}

std::optional<std::string> calibrationCoverageWarning(const CalibrationCoverage& c) {
  if (c.measured + c.interpolated == 0 || c.op_kind_fit == 0 || c.kernel_ns <= 0) return std::nullopt;
  const double share = double(c.op_kind_fit_ns) / double(c.kernel_ns);
  if (share < kCoverageWarnShare) return std::nullopt;
  constexpr size_t kNamed = 3;
  std::string shapes;
  for (size_t i = 0; i < std::min(kNamed, c.unmeasured_shapes.size()); ++i)
    shapes += (i ? ", " : "") + c.unmeasured_shapes[i];
  if (c.unmeasured_shapes.size() > kNamed) shapes += fmt::format(" and {} more", c.unmeasured_shapes.size() - kNamed);
  return fmt::format(
      "the calibration did not measure {} of the plan's {} kernel tasks, {:.1f}% of their time ({} {}: {}), nor "
      "two shapes around them: their times come from their op kind's fit over other shapes, which can be far off "
      "outside them (a profiled run of this job among the runs tandem calibrate fits would measure them)",
      c.op_kind_fit, c.kernel_tasks, 100 * share, c.unmeasured_shapes.size(),
      c.unmeasured_shapes.size() == 1 ? "shape" : "shapes", shapes);
}

}  // namespace tandem::sim
