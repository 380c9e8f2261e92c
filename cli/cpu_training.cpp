#include "cli/cpu_training.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "cli/restart_supervisor.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/consistency.h"
#include "engine/cpu/executor.h"
#include "engine/numerics/data.h"
#include "vocabulary/version.h"

namespace tandem::cli {

TrainingReport trainOnCpu(const Plan& plan, int steps, int log_every, std::FILE* out,
                          const CheckpointOptions& checkpoints) {
  TrainingReport rep;
  const int last = steps > 0 ? steps : plan.job.training.steps;
  rep.optimal_loss = makeTokenSource(plan.job)->optimalLoss();
  cpu::CpuExecutor exec(plan);
  if (checkpoints.resume) {
    if (checkpoints.dir.empty()) throw std::runtime_error("train: --resume needs --checkpoint-dir");
    if (const auto latest = checkpoint::latestCheckpoint(checkpoints.dir)) {
      exec.restore(checkpoint::readCheckpoint(*latest, plan));
      fmt::print(out, "resumed from {} (step {})\n", latest->string(), exec.stepsDone());
    } else {
      fmt::print(out, "no complete checkpoint in {}: starting from step 0\n", checkpoints.dir);
    }
  }
  std::unique_ptr<checkpoint::AsyncWriter> writer;
  if (!checkpoints.dir.empty() && checkpoints.every > 0) {
    writer = std::make_unique<checkpoint::AsyncWriter>(checkpoints.dir, plan, checkpoints.keep,
                                                       std::string(toolVersion()));
    writer->on_written = [out](const std::filesystem::path& folder) {
      fmt::print(out, "checkpoint written: {}\n", folder.string());
      std::fflush(out);
    };
  }
  const int first = exec.stepsDone();
  rep.steps = std::max(0, last - first);
  const int tail = std::max(1, rep.steps / 10);
  double tail_sum = 0;
  const double tokens = double(plan.job.tokensPerStep());
  for (int s = first; s < last; ++s) {
    const cpu::StepResult r = exec.step();
    rep.seconds += r.seconds;
    if (s == first) rep.first_loss = r.loss;
    if (s >= last - tail) tail_sum += r.loss;
    if (s == first || s + 1 == last || (log_every > 0 && (s + 1) % log_every == 0))
      fmt::print(out, "step {:>5}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}  {:.0f} tokens/s\n", s + 1, last,
                 r.loss, r.grad_norm, r.lr, tokens / std::max(r.seconds, 1e-9));
    std::fflush(out);
    if (checkpoints.flip_rank >= 0 && s + 1 == checkpoints.flip_after_step) {
      if (const auto target = checkpoint::flipTarget(plan, checkpoints.flip_rank); target.buffer >= 0)
        exec.flipBit(checkpoints.flip_rank, target.buffer, target.bit);
      fmt::print(out, "test: one bit of rank {}'s parameters flipped after step {}\n", checkpoints.flip_rank, s + 1);
    }
    if (checkpoints.check_replicas_every > 0 && (s + 1) % checkpoints.check_replicas_every == 0) {
      const auto mismatch = checkpoint::checkReplicas(
          plan, [&exec](int rank, int buffer) { return exec.bufferBytes(rank, buffer); });
      if (mismatch) {
        if (writer) writer->wait();  // the checkpoints before the fault stay usable
        throw std::runtime_error(fmt::format("step {}: {}", s + 1, mismatch->line));
      }
    }
    // The step loop hands the state over and goes on; the write runs beside it.
    if (writer && (s + 1) % checkpoints.every == 0) writer->submit(exec.snapshot());
    testKillAfterStep(s + 1);
  }
  if (writer) {
    writer->wait();
    const checkpoint::WriteCost c = writer->cost();
    fmt::print(out, "checkpoints: {} written beside the steps ({:.3f} GB in {:.2f} s, {:.2f} GB/s); the step loop "
               "waited {:.2f} s for writes\n",
               c.writes, double(c.bytes) / 1e9, c.write_s, c.gbPerSecond(), c.loop_waited_s);
  }
  rep.final_loss = rep.steps > 0 ? tail_sum / std::min(tail, rep.steps) : 0;
  rep.tokens_per_second = tokens * rep.steps / std::max(rep.seconds, 1e-9);
  return rep;
}

}  // namespace tandem::cli
