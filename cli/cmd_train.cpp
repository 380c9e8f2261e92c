// tandem train: train a job on the CPU reference executor.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "cli/command_registry.h"
#include "cli/cpu_training.h"
#include "cli/job_options.h"
#include "cli/number_checks.h"
#include "cli/restart_supervisor.h"
#include "engine/plan/planner.h"

namespace tandem::cli {
namespace {

struct TrainOptions {
  JobOptions job;
  std::string backend = "cpu";
  int steps = 0;
  int log_every = 10;
  CheckpointOptions checkpoints;
  int restarts = 0;
};

// The command line of one attempt under --restarts: these options, less
// --restarts.
std::vector<std::string> attemptArguments(const TrainOptions& o) {
  std::vector<std::string> args{"train", o.job.job, "--backend", o.backend, "--log-every", std::to_string(o.log_every)};
  for (const std::string& s : o.job.sets) args.insert(args.end(), {"--set", s});
  if (o.steps > 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  const CheckpointOptions& c = o.checkpoints;
  args.insert(args.end(), {"--checkpoint-dir", c.dir, "--checkpoint-every", std::to_string(c.every)});
  if (c.keep > 0) args.insert(args.end(), {"--keep", std::to_string(c.keep)});
  if (c.check_replicas_every > 0)
    args.insert(args.end(), {"--check-replicas-every", std::to_string(c.check_replicas_every)});
  if (c.resume) args.push_back("--resume");
  return args;
}

void addTrainCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Train a job on the CPU reference executor, printing the loss");
  auto o = std::make_shared<TrainOptions>();
  o->job.addTo(*cmd, true);
  cmd->add_option("--backend", o->backend, "executor: cpu (the reference; GPUs use `tandem run`)")
      ->check(CLI::IsMember({"cpu"}));
  cmd->add_option("--steps", o->steps, "steps to train (default: training.steps of the job)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--log-every", o->log_every, "print a line every N steps")->check(wholeNumberAtLeast(1));
  cmd->add_option("--checkpoint-dir", o->checkpoints.dir,
                  "folder of checkpoints (DIR/step-N: a file per rank and layer, manifest.json written last)")
      ->type_name("DIR");
  cmd->add_option("--checkpoint-every", o->checkpoints.every, "write a checkpoint every N steps (on a thread of its own)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--keep", o->checkpoints.keep, "complete checkpoints to keep, the newest (default: all)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--check-replicas-every", o->checkpoints.check_replicas_every,
                  "every N steps compare the data-parallel replicas' parameters (hashes) and stop with an error "
                  "naming the ranks and the tensor when they differ")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--restarts", o->restarts,
                  "run the training as a child process and start it again from the newest complete checkpoint when "
                  "it dies, at most this many times (needs --checkpoint-dir and --checkpoint-every)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--resume", o->checkpoints.resume,
                "continue from the newest complete checkpoint in --checkpoint-dir (from step 0 when there is none); "
                "--steps is the step to train up to");
  cmd->callback([o] {
    if (o->restarts > 0) {
      if (o->checkpoints.dir.empty() || o->checkpoints.every <= 0)
        throw std::runtime_error("train: --restarts needs --checkpoint-dir and --checkpoint-every (a restart resumes "
                                 "from the newest checkpoint)");
      if (const int status = runWithRestarts(attemptArguments(*o), o->restarts, stdout); status != 0)
        throw std::runtime_error(fmt::format("train: the run failed (status {}) after {} restart{}", status,
                                             o->restarts, o->restarts == 1 ? "" : "s"));
      return;
    }
    const JobSpec job = o->job.load();
    const Plan plan = buildPlan(job);
    fmt::print("training {} on the CPU reference executor: {} ranks, {} tokens per step\n", job.name,
               plan.world_size, job.tokensPerStep());
    // Tests of the replica check: TANDEM_TEST_FLIP_BIT=RANK:STEP flips one
    // bit of that rank's parameters after that step.
    if (const char* flip = std::getenv("TANDEM_TEST_FLIP_BIT")) {
      if (std::sscanf(flip, "%d:%d", &o->checkpoints.flip_rank, &o->checkpoints.flip_after_step) != 2)
        throw std::runtime_error("TANDEM_TEST_FLIP_BIT takes RANK:STEP");
    }
    if (o->checkpoints.every > 0 && o->checkpoints.dir.empty())
      throw std::runtime_error("train: --checkpoint-every needs --checkpoint-dir");
    const TrainingReport rep = trainOnCpu(plan, o->steps, o->log_every, stdout, o->checkpoints);
    fmt::print("done: {} steps in {:.1f} s ({:.0f} tokens/s); loss {:.4f} -> {:.4f} (mean of the last tenth)\n",
               rep.steps, rep.seconds, rep.tokens_per_second, rep.first_loss, rep.final_loss);
    if (!std::isnan(rep.optimal_loss))
      fmt::print("data entropy (optimal loss) {:.4f} nats/token; gap {:.4f} nats\n", rep.optimal_loss,
                 rep.final_loss - rep.optimal_loss);
    if (!std::isfinite(rep.final_loss)) throw std::runtime_error("training diverged (loss is not finite)");
  });
}

const CommandRegistration reg{"train", 20, &addTrainCommand};

}  // namespace
}  // namespace tandem::cli
