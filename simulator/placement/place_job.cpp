#include "simulator/placement/place_job.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/calibration_warnings.h"
#include "simulator/cost/cost_model.h"

namespace tandem::sim {

PlaceOutcome placeJob(const Plan& plan, const Topology& topo, const PlaceSettings& settings,
                      const std::function<void(const std::string&)>& on_warning) {
  PlaceOutcome out;
  auto warn = [&](const std::string& line) {
    out.warnings.push_back(line);
    if (on_warning) on_warning(line);
  };
  // The calibration as simulateJob resolves it.
  ResolvedCalibration resolved = resolveCalibration(settings.calibration, topo);
  if (resolved.warning) warn(*resolved.warning);
  const Calibration cal = std::move(resolved.calibration);
  out.calibration_used = resolved.used;
  const RooflineCostModel cost(RooflineParams::defaults(), cal);
  for (const std::string& w : calibrationWarnings(plan, topo, cal, cost).lines) warn(w);
  SimOptions so;
  so.symmetry = settings.symmetry;
  so.collective_calibration = cal.collectives;
  out.verdict = choosePlacement(plan, topo, cost, so, settings.options);
  return out;
}

}  // namespace tandem::sim
