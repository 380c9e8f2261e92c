#pragma once
// The human-readable summary of a Plan printed by `tandem plan` and `tandem demo`.

#include <string>

#include "engine/plan.h"

namespace tandem::cli {

std::string planSummaryText(const Plan& plan);

}  // namespace tandem::cli
