#pragma once
// The human-readable summary of a Plan printed by `tandem plan` and `tandem demo`.

#include <optional>
#include <string>

#include "engine/plan/plan.h"

namespace tandem::cli {

std::string planSummaryText(const Plan& plan);

// A job that shards its parameters (ZeRO-3) over a single data-parallel
// rank gathers each of them from itself every step: the note saying so and
// how to run it without, or nothing.
std::optional<std::string> oneRankShardingNote(const Plan& plan);

}  // namespace tandem::cli
