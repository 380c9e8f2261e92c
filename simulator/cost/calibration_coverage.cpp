#include "simulator/cost/calibration_coverage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tandem::sim {

CalibrationCoverage calibrationCoverage(const Plan& plan, const RooflineCostModel& cost, const DeviceSpec& device) {
  CalibrationCoverage c;
  const Precision precision = plan.job.training.precision;
  // Shape -> how it lies past the measured ones ("" within them).
  std::map<std::string, std::string> beyond;
  for (const RankPlan& rp : plan.programs)
    for (const Task& t : rp.tasks) {
      const auto [ns, source] = cost.taskTime(t, device, precision);
      if (source == TimeSource::NoKernel) continue;
      ++c.kernel_tasks;
      c.kernel_ns += ns;
      if (source == TimeSource::OpKindFit) c.op_kind_fit_ns += ns;
      switch (source) {
        case TimeSource::Measured:
          ++c.measured;
          c.measured_ns += ns;
          break;
        case TimeSource::Interpolated: {
          ++c.interpolated;
          c.interpolated_ns += ns;
          c.interpolated_ns_by_op[costOpKind(t)] += ns;
          const std::string shape = fmt::format("{} {}", toString(costOpKind(t)), shapeKey(t));
          auto known = beyond.find(shape);
          if (known == beyond.end()) {
            std::vector<std::string> fields = cost.fieldsBeyondMeasured(t);
            // The attention's efficiency field b x kv is not in its shape key.
            for (std::string& f : fields)
              if (f == "bkv") f = "b x kv";
            known = beyond.emplace(shape, fields.empty() ? std::string() : fmt::format("{}", fmt::join(fields, ", ")))
                        .first;
          }
          if (!known->second.empty()) {
            c.beyond_ns += ns;
            c.beyond_ns_by_shape[fmt::format("{} ({})", shape, known->second)] += ns;
          }
          break;
        }
        case TimeSource::Roofline:
          ++c.roofline;
          c.roofline_ns += ns;
          break;
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

std::optional<NeighbourReadAccuracy> neighbourReadAccuracy(const CalibrationCoverage& coverage,
                                                           const RooflineCostModel& cost, const DeviceSpec& device,
                                                           Precision precision) {
  std::vector<std::pair<double, double>> weighted;  // (error, weight)
  for (const auto& [op, ns] : coverage.interpolated_ns_by_op) {
    const std::vector<double> errors = cost.neighbourReadErrors(op, device, precision);
    if (errors.empty() || ns <= 0) continue;
    // Each kind weighs as much as its part of the plan's interpolated time,
    // spread evenly over its measured shapes.
    for (double e : errors) weighted.emplace_back(e, double(ns) / double(errors.size()));
  }
  if (weighted.empty()) return std::nullopt;
  std::sort(weighted.begin(), weighted.end());
  double total = 0;
  for (const auto& [e, w] : weighted) total += w;
  auto quantile = [&](double q) {
    double below = 0;
    for (const auto& [e, w] : weighted)
      if ((below += w) >= q * total) return e;
    return weighted.back().first;
  };
  return NeighbourReadAccuracy{int(weighted.size()), quantile(0.5), quantile(0.9)};
}

std::optional<std::string> calibrationCoverageSummary(const CalibrationCoverage& c,
                                                      const std::optional<NeighbourReadAccuracy>& accuracy) {
  if (c.measured + c.interpolated == 0 || c.kernel_ns <= 0) return std::nullopt;
  auto pct = [&](int64_t ns) { return 100.0 * double(ns) / double(c.kernel_ns); };
  std::string line = fmt::format("kernel time {:.0f}% measured", pct(c.measured_ns));
  if (c.interpolated_ns > 0) line += fmt::format(", {:.0f}% read off measured neighbours", pct(c.interpolated_ns));
  if (c.kernel_ns > 0 && double(c.beyond_ns) >= kCoverageWarnShare * double(c.kernel_ns)) {
    const auto largest = std::max_element(c.beyond_ns_by_shape.begin(), c.beyond_ns_by_shape.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    line += fmt::format(" ({:.0f}% outside the measured shapes' range in some number, most of it {}: read by the "
                        "trend of the nearest, at most 10% beyond their efficiency)",
                        pct(c.beyond_ns), largest->first);
  }
  if (c.op_kind_fit_ns > 0) line += fmt::format(", {:.0f}% from an op kind's fit", pct(c.op_kind_fit_ns));
  if (c.roofline_ns > 0) line += fmt::format(", {:.0f}% from the roofline", pct(c.roofline_ns));
  if (c.interpolated_ns > 0 && accuracy)
    line += fmt::format("; read so, {} measured shapes of those kinds come {:.1f}% off at the median, {:.1f}% at p90 "
                        "(shapes farther from the measured ones can read worse)",
                        accuracy->shapes, 100 * accuracy->median, 100 * accuracy->p90);
  return line;
}

}  // namespace tandem::sim
