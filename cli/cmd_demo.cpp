// tandem demo: the main job of a fresh checkout. Plans the default job
// (GPT-2 124M, data parallel 8), then trains a tiny GPT on the CPU reference
// executor so the numbers can be watched converging.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>

#include "cli/command_registry.h"
#include "cli/cpu_training.h"
#include "cli/plan_summary.h"
#include "engine/planner.h"

namespace tandem::cli {
namespace {

void addDemoCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand("demo", "Plan the default job and train a tiny GPT on the CPU");
  auto steps = std::make_shared<int>(0);
  cmd->add_option("--train-steps", *steps, "steps of the tiny CPU training run (default: the tiny job's steps)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([steps] {
    fmt::print("== 1. Plan of the default job\n");
    const Plan plan = buildPlan(defaultJob());
    fmt::print("{}\n", planSummaryText(plan));

    fmt::print("== 2. Training a tiny GPT on the CPU reference executor\n");
    const Plan tiny = buildPlan(tinyJob());
    const TrainingReport rep = trainOnCpu(tiny, *steps, 50, stdout);
    fmt::print("tiny GPT: loss {:.4f} -> {:.4f} in {} steps ({:.1f} s); the data's entropy is {:.4f} nats\n",
               rep.first_loss, rep.final_loss, rep.steps, rep.seconds, rep.optimal_loss);
  });
}

const CommandRegistration reg{"demo", 100, &addDemoCommand};

}  // namespace
}  // namespace tandem::cli
