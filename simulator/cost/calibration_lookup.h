#pragma once
// Where a calibration named by the user is: a file, or the name of one that
// comes with tandem (resources/calibration/NAME.yaml).

#include <optional>
#include <string>
#include <vector>

#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// The calibration setting that asks for the profile shipped for the
// topology's GPU (tandem simulate's default), and the one that asks for
// the roofline defaults.
inline constexpr const char* kShippedCalibration = "auto";
inline constexpr const char* kNoCalibration = "none";

// The profile that comes with tandem for the GPUs of `topo`
// (resources/calibration/<model>.yaml: h200.yaml, h100.yaml), when every
// GPU of it is of one model and such a profile exists.
std::optional<std::string> shippedCalibrationFor(const Topology& topo);

// The path to load; `name_or_file` unchanged when nothing matches (loading
// it then fails with the user's words).
std::string calibrationPath(const std::string& name_or_file);

// A calibration setting (auto, none, a name or a file) resolved for a
// topology, as every command that simulates takes it: the calibration,
// what to call it ("h200.yaml (shipped for the H200)", "roofline
// defaults"), and a warning when auto finds no profile for the GPUs.
// Throws CalibrationError for a file that does not load.
struct ResolvedCalibration {
  Calibration calibration;
  std::string used = "roofline defaults";
  std::optional<std::string> warning;
};
ResolvedCalibration resolveCalibration(const std::string& setting, const Topology& topo);

// The calibrations that come with tandem, by file path, sorted.
std::vector<std::string> committedCalibrations();

}  // namespace tandem::sim
