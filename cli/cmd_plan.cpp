// tandem plan: build the per-rank Plan of a job and summarise it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/number_checks.h"
#include "cli/plan_summary.h"
#include "engine/memory_fit.h"
#include "engine/plan_json.h"
#include "engine/planner.h"

namespace tandem::cli {
namespace {

constexpr double kGiB = double(int64_t(1) << 30);

// What fits `gib` of device memory per rank: the job as it is, or the
// planner's choices (engine/memory_fit.h). Counts the plan's arena alone:
// the CUDA executor's own buffers depend on the build and are named.
std::string fitText(const JobSpec& job, const Plan& plan, double gib) {
  const int64_t budget = int64_t(std::floor(gib * kGiB));
  const int64_t arena = plan.programs.at(0).memory.arena_bytes;
  std::string s = fmt::format("fit        {:.2f} GiB per rank: ", gib);
  if (arena <= budget) {
    s += fmt::format("the plan fits as it is ({:.2f} GiB)\n", arena / kGiB);
  } else {
    const std::vector<FittingChoice> fits = choicesThatFit(job, budget, [](const Plan&) { return int64_t(0); });
    s += fmt::format("the plan needs {:.2f} GiB; ", arena / kGiB);
    if (fits.empty()) s += "no recompute policy, micro-batch or LM head split fits\n";
    else s += "choices that fit:\n";
    for (const FittingChoice& f : fits) s += "           " + f.text(job) + "\n";
  }
  return s + "           (planned arenas; a GPU run adds about 0.1 GiB of executor buffers and keeps 0.5 GiB free)\n";
}

void addPlanCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand("plan", "Build the per-rank plan of a job and print its summary");
  auto opts = std::make_shared<JobOptions>();
  auto json_path = std::make_shared<std::string>();
  auto fit_gib = std::make_shared<double>(0);
  opts->addTo(*cmd, true);
  cmd->add_option("--json", *json_path, "also write the whole plan as JSON (docs/plan-format.md)")
      ->type_name("FILE");
  cmd->add_option("--fit", *fit_gib,
                  "also say whether the plan fits this much device memory per rank (GiB), and if not which "
                  "recompute policy, micro-batch and LM head split would (largest micro-batch per policy)")
      ->type_name("GIB")
      ->check(numberAboveZero());
  cmd->callback([opts, json_path, fit_gib] {
    const JobSpec job = opts->load();
    const Plan plan = buildPlan(job);
    if (!json_path->empty()) writePlanJson(plan, *json_path);
    fmt::print("{}", planSummaryText(plan));
    if (*fit_gib > 0) fmt::print("{}", fitText(job, plan, *fit_gib));
    if (!json_path->empty()) fmt::print("plan written to {}\n", *json_path);
  });
}

const CommandRegistration reg{"plan", 10, &addPlanCommand};

}  // namespace
}  // namespace tandem::cli
