// tandem plan: build the per-rank Plan of a job and summarise it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/plan_summary.h"
#include "engine/plan_json.h"
#include "engine/planner.h"

namespace tandem::cli {
namespace {

void addPlanCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand("plan", "Build the per-rank plan of a job and print its summary");
  auto opts = std::make_shared<JobOptions>();
  auto json_path = std::make_shared<std::string>();
  opts->addTo(*cmd, true);
  cmd->add_option("--json", *json_path, "also write the whole plan as JSON (docs/plan-format.md)")
      ->type_name("FILE");
  cmd->callback([opts, json_path] {
    const JobSpec job = opts->load();
    const Plan plan = buildPlan(job);
    if (!json_path->empty()) writePlanJson(plan, *json_path);
    fmt::print("{}", planSummaryText(plan));
    if (!json_path->empty()) fmt::print("plan written to {}\n", *json_path);
  });
}

const CommandRegistration reg{"plan", 10, &addPlanCommand};

}  // namespace
}  // namespace tandem::cli
