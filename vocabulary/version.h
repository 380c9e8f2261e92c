#pragma once
// The version every run, plan and calibration tandem writes is stamped with
// ("tandem 0.1.0"): one definition, set by the build from the project's
// version, so a run written by the CLI, the GUI or a benchmark says the same.

#include <string_view>

namespace tandem {

std::string_view toolVersion();

}  // namespace tandem
