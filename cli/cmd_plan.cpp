// tandem plan: build the per-rank Plan of a job and summarise it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/plan_summary.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/memory/memory_fit.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/parse_number.h"
#include "engine/spec/resources.h"
#include "simulator/topology/topology_presets.h"

namespace tandem::cli {
namespace {

constexpr double kGiB = double(int64_t(1) << 30);

// What --fit measures against: a number of GiB, or the smallest GPU of a
// topology (preset or file).
struct FitBudget {
  int64_t bytes = 0;
  std::string what;  // "7.00 GiB free", "dgx-h100's H100 (79.65 GiB)"
};

FitBudget resolveFit(const std::string& arg) {
  if (const auto gib = parseFiniteNumber(arg)) {
    return {int64_t(std::floor(*gib * kGiB)), fmt::format("{:.2f} GiB free", *gib)};
  }
  sim::Topology topo;
  try {
    topo = sim::loadTopology(resourcePath(arg));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--fit: expected a number of GiB or a topology: {}", e.what()));
  }
  const sim::DeviceSpec* smallest = nullptr;
  for (const sim::DeviceSpec& d : topo.devices)
    if (d.memory_bytes > 0 && (!smallest || d.memory_bytes < smallest->memory_bytes)) smallest = &d;
  if (!smallest) throw std::runtime_error(fmt::format("--fit: topology '{}' gives no GPU memory size", arg));
  const std::string model = smallest->model.empty() ? smallest->name : smallest->model;
  return {smallest->memory_bytes,
          fmt::format("{}'s {}{} ({:.2f} GiB)", arg, model,
                      smallest->mig_profile.empty() ? "" : " MIG " + smallest->mig_profile,
                      double(smallest->memory_bytes) / kGiB)};
}

// What fits `fit` (free device memory per rank): the job as it is, or the
// planner's choices (engine/memory/memory_fit.h). Counts what `tandem run` counts
// before it allocates: the arena, the executor's buffers and the reserve
// it keeps free (engine/memory/gpu_footprint.h).
std::string fitText(const JobSpec& job, const Plan& plan, const FitBudget& fit) {
  const int64_t budget = fit.bytes;
  const int64_t arena = gpu_footprint::largestProgram(plan).memory.arena_bytes;
  const int64_t executor = gpu_footprint::executorFootprint(plan).total();
  const int64_t needed = arena + executor + gpu_footprint::kRunReserveBytes;
  std::string s = fmt::format("fit        {} per rank: ", fit.what);
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
  auto fit = std::make_shared<std::string>();
  opts->addTo(*cmd, true);
  cmd->add_option("--json", *json_path, "also write the whole plan as JSON (docs/plan-format.md)")
      ->type_name("FILE");
  cmd->add_option("--fit", *fit,
                  "also say whether a GPU run fits this much free device memory per rank (GiB), or the smallest "
                  "GPU of a topology (preset or file), counting the executor's buffers and reserve as tandem run "
                  "does; and if not, which recompute policy, micro-batch and LM head split would (largest "
                  "micro-batch per policy)")
      ->type_name("GIB|TOPOLOGY")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // Anything that reads as a number must be a finite one above 0
            // ("nan", "1e400" and "" are not topologies either).
            const char* begin = v.c_str();
            char* end = nullptr;
            std::strtod(begin, &end);
            const bool numeric = end != begin && *end == '\0';
            const auto x = parseFiniteNumber(v);
            if (v.find_first_not_of(" \t") == std::string::npos || (numeric && (!x || *x <= 0)))
              return "takes a number greater than 0 or a topology, not '" + v + "'";
            return {};
          },
          "GIB>0|TOPOLOGY"));
  cmd->callback([opts, json_path, fit] {
    const JobSpec job = opts->load();
    // Resolved first: a bad --fit leaves no output behind.
    const std::optional<FitBudget> budget = fit->empty() ? std::nullopt : std::optional(resolveFit(*fit));
    const Plan plan = buildPlan(job);
    if (!json_path->empty()) writePlanJson(plan, *json_path);
    fmt::print("{}", planSummaryText(plan));
    if (budget) fmt::print("{}", fitText(job, plan, *budget));
    if (!json_path->empty()) fmt::print("plan written to {}\n", *json_path);
  });
}

const CommandRegistration reg{"plan", 10, &addPlanCommand};

}  // namespace
}  // namespace tandem::cli
