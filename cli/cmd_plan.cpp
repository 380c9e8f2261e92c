// tandem plan: build the per-rank Plan of a job and summarise it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/number_checks.h"
#include "cli/plan_summary.h"
#include "engine/gpu_footprint.h"
#include "engine/memory_fit.h"
#include "engine/plan_json.h"
#include "engine/planner.h"

namespace tandem::cli {
namespace {

constexpr double kGiB = double(int64_t(1) << 30);

// What fits `gib` of free device memory per rank: the job as it is, or the
// planner's choices (engine/memory_fit.h). Counts what `tandem run` counts
// before it allocates: the arena, the executor's buffers and the reserve
// it keeps free (engine/gpu_footprint.h).
std::string fitText(const JobSpec& job, const Plan& plan, double gib) {
  const int64_t budget = int64_t(std::floor(gib * kGiB));
  const int64_t arena = plan.programs.at(0).memory.arena_bytes;
  const int64_t executor = gpu_footprint::executorFootprint(plan).total();
  const int64_t needed = arena + gpu_footprint::runOverheadBytes(plan);
  std::string s = fmt::format("fit        {:.2f} GiB free per rank: ", gib);
  const std::string parts =
      fmt::format("{:.2f} GiB (arena {:.2f} + executor {:.2f} + reserve {:.2f})", needed / kGiB, arena / kGiB,
                  executor / kGiB, gpu_footprint::kRunReserveBytes / kGiB);
  if (needed <= budget) return s + "the plan fits as it is: " + parts + "\n";
  const std::vector<FittingChoice> fits = choicesThatFit(job, budget, gpu_footprint::runOverheadBytes);
  s += "the plan needs " + parts + "; ";
  if (fits.empty()) return s + "no recompute policy, micro-batch or LM head split fits\n";
  s += "choices that fit (arena, executor and reserve):\n";
  for (const FittingChoice& f : fits) s += "           " + f.text(job) + "\n";
  return s;
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
