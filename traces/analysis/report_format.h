#pragma once
// Renders a RunReport: a stable JSON document (keys in a fixed order, used by
// scripts, other commands and the golden tests) and a readable text table.

#include <string>

#include "traces/analysis/analysis.h"

namespace tandem::traces {

inline constexpr int kReportJsonVersion = 1;

std::string reportToJson(const RunReport& report);
std::string reportToText(const RunReport& report);

}  // namespace tandem::traces
