// tandem demo: the main job of a fresh checkout. Plans the default job
// (GPT-2 124M, data parallel 8), replays the plan on a simulated 8-GPU
// NVSwitch machine into a trace file, reports on that trace like on a real
// one, trains a tiny GPT on the CPU reference executor until it meets the
// entropy of its data, and, when this machine has NVIDIA GPUs and tandem was
// built with CUDA, runs the default job on them for real.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/command_registry.h"
#include "cli/cpu_training.h"
#include "cli/number_checks.h"
#include "cli/plan_summary.h"
#include "engine/plan/planner.h"
#include "simulator/pipeline/simulate_job.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/report_format.h"
#include "traces/store/trace_reader.h"
#ifdef TANDEM_HAVE_CUDA
#include "engine/cuda/device.h"
#endif

namespace tandem::cli {
namespace {

struct DemoOptions {
  int train_steps = 0;
  std::string topology = "dgx-h200";
  std::string out = "tandem-demo.sqlite";
  int gpu_steps = 20;
};

// Simulates `plan` on the topology, writes the run into a fresh trace file
// and returns the run id.
int64_t simulateIntoTrace(const Plan& plan, const DemoOptions& o) {
  sim::SimulateRequest request;
  request.job = plan.job;
  request.plan = plan;
  request.settings.topology = o.topology;
  request.out_path = o.out;
  request.fresh_out = true;
  const sim::SimulateOutcome out = sim::simulateJob(request);
  const sim::SimResult& result = out.result;
  const double tokens_per_s = double(out.plan.job.tokensPerStep()) / (double(result.step_ns) * 1e-9);
  fmt::print("simulated step on {}: {:.2f} ms, {:.0f} tokens/s ({} collectives, {} flows, {} events; kernel times: "
             "{})\n",
             out.topology.name, double(result.step_ns) / 1e6, tokens_per_s, result.stats.collectives,
             result.stats.flows, result.stats.events, out.calibration_used);
  return out.run_id;
}

#ifdef TANDEM_HAVE_CUDA
// Runs `tandem run default` on the local GPUs through this same binary, so
// the demo shows exactly what a user would type.
void runOnGpus(const DemoOptions& o) {
  std::string why;
  const int gpus = cuda::usableGpuCount(&why);
  if (gpus == 0) {
    fmt::print("no usable NVIDIA GPU here ({}); skipping the real run\n", why);
    return;
  }
  const int use = std::min(gpus, 2);
  // Resolve our own path here: inside the shell std::system starts,
  // /proc/self/exe would be the shell.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = fmt::format("'{}' run default --gpus {} --steps {}", self, use, o.gpu_steps);
  fmt::print("$ tandem run default --gpus {} --steps {}\n", use, o.gpu_steps);
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("demo: the GPU run failed (see above)");
}
#endif

void runDemo(const DemoOptions& o) {
  fmt::print("== 1. Plan of the default job\n");
  const Plan plan = buildPlan(defaultJob());
  fmt::print("{}\n", planSummaryText(plan));

  fmt::print("== 2. The same plan simulated on {}\n", o.topology);
  const int64_t run = simulateIntoTrace(plan, o);
  fmt::print("trace written to {} (run {}, kind simulated)\n\n", o.out, run);

  fmt::print("== 3. Report of the simulated trace (`tandem report {}`)\n", o.out);
  {
    traces::TraceReader reader(o.out);
    fmt::print("{}\n", traces::reportToText(traces::analyzeRun(reader, run)));
  }

  fmt::print("== 4. Training a tiny GPT on the CPU reference executor\n");
  const Plan tiny = buildPlan(tinyJob());
  const TrainingReport rep = trainOnCpu(tiny, o.train_steps, 50, stdout);
  fmt::print("tiny GPT: loss {:.4f} -> {:.4f} in {} steps ({:.1f} s); the data's entropy is {:.4f} nats\n\n",
             rep.first_loss, rep.final_loss, rep.steps, rep.seconds, rep.optimal_loss);

  fmt::print("== 5. The default job on this machine's GPUs\n");
#ifdef TANDEM_HAVE_CUDA
  runOnGpus(o);
#else
  fmt::print("this tandem was built without CUDA; skipping the real run\n");
#endif
}

void addDemoCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "demo", "Plan the default job, simulate and report it, train a tiny GPT on the CPU, run on GPUs if present");
  auto o = std::make_shared<DemoOptions>();
  cmd->add_option("--train-steps", o->train_steps, "steps of the tiny CPU training run (default: the tiny job's)")
      ->check(wholeNumberAtLeast(0));
  cmd->add_option("--topology", o->topology, "topology preset or file for the simulation")->capture_default_str();
  cmd->add_option("--out", o->out, "trace file for the simulated run (replaced)")->capture_default_str();
  cmd->add_option("--gpu-steps", o->gpu_steps, "steps of the real GPU run")->check(wholeNumberAtLeast(1));
  cmd->callback([o] { runDemo(*o); });
}

const CommandRegistration reg{"demo", 100, &addDemoCommand};

}  // namespace
}  // namespace tandem::cli
