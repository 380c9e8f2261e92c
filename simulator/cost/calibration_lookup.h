#pragma once
// Where a calibration named by the user is: a file, or the name of one that
// comes with tandem (resources/calibration/NAME.yaml).

#include <string>
#include <vector>

namespace tandem::sim {

// The path to load; `name_or_file` unchanged when nothing matches (loading
// it then fails with the user's words).
std::string calibrationPath(const std::string& name_or_file);

// The calibrations that come with tandem, by file path, sorted.
std::vector<std::string> committedCalibrations();

}  // namespace tandem::sim
