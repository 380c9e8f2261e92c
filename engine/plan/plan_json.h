#pragma once
// The Plan as JSON (docs/plan-format.md describes every field). Writing and
// reading round-trip exactly: planFromJson(planToJson(p)) == p.

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "engine/plan/plan.h"

namespace tandem {

inline constexpr const char* kPlanFormatName = "tandem-plan";

// A plan document that cannot be read: malformed JSON, a missing or mistyped
// field, an unknown enum spelling, a format version newer than this build.
// The message names the JSON path of the bad field ("programs[0].tasks[12].stream").
class PlanFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

nlohmann::json planToJson(const Plan& plan);

// Throws PlanFormatError. The embedded job YAML is parsed again (without
// file-system checks) and must match its stored content hash.
Plan planFromJson(const nlohmann::json& doc);

// Writes to a temporary file in the same folder and renames it over `path`,
// so readers never see half a plan. Throws std::runtime_error on I/O failure.
void writePlanJson(const Plan& plan, const std::string& path);

// Throws PlanFormatError (message prefixed with `path`) or std::runtime_error
// when the file cannot be read.
Plan readPlanJson(const std::string& path);

}  // namespace tandem
