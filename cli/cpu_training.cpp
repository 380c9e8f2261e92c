#include "cli/cpu_training.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "engine/cpu/executor.h"
#include "engine/numerics/data.h"

namespace tandem::cli {

TrainingReport trainOnCpu(const Plan& plan, int steps, int log_every, std::FILE* out) {
  TrainingReport rep;
  rep.steps = steps > 0 ? steps : plan.job.training.steps;
  rep.optimal_loss = makeTokenSource(plan.job)->optimalLoss();
  cpu::CpuExecutor exec(plan);
  const int tail = std::max(1, rep.steps / 10);
  double tail_sum = 0;
  const double tokens = double(plan.job.tokensPerStep());
  for (int s = 0; s < rep.steps; ++s) {
    const cpu::StepResult r = exec.step();
    rep.seconds += r.seconds;
    if (s == 0) rep.first_loss = r.loss;
    if (s >= rep.steps - tail) tail_sum += r.loss;
    if (s == 0 || s + 1 == rep.steps || (log_every > 0 && (s + 1) % log_every == 0))
      fmt::print(out, "step {:>5}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}  {:.0f} tokens/s\n", s + 1,
                 rep.steps, r.loss, r.grad_norm, r.lr, tokens / std::max(r.seconds, 1e-9));
    std::fflush(out);
  }
  rep.final_loss = tail_sum / tail;
  rep.tokens_per_second = tokens * rep.steps / std::max(rep.seconds, 1e-9);
  return rep;
}

}  // namespace tandem::cli
