#pragma once
// Placement of a job's plan on a topology, verified by simulation, as one
// call: `tandem place` and `tandem run --placement auto` call it, so the two
// choose alike. Kernel times come from a calibration as `tandem simulate`
// takes it (auto: the profile shipped for the topology's GPU, else the
// roofline defaults with a warning).

#include <functional>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/placement/placement.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

struct PlaceSettings {
  std::string calibration = "auto";  // auto, none, a calibration name or file
  SymmetryMode symmetry = SymmetryMode::Auto;  // for worlds above options.exact_simulation_ranks
  PlacementOptions options;
};

struct PlaceOutcome {
  PlacementVerdict verdict;
  std::string calibration_used;       // a file name, or "roofline defaults"
  std::vector<std::string> warnings;  // each also reached on_warning as it was found
};

// Throws TopologyError, CalibrationError, PlacementError, SimulationError.
PlaceOutcome placeJob(const Plan& plan, const Topology& topo, const PlaceSettings& settings,
                      const std::function<void(const std::string&)>& on_warning = {});

}  // namespace tandem::sim
