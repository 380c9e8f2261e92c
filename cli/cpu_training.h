#pragma once
// Training on the CPU reference executor with per-step progress lines, shared
// by `tandem train` and `tandem demo`.

#include <cstdio>

#include "engine/plan/plan.h"

namespace tandem::cli {

struct TrainingReport {
  int steps = 0;
  double first_loss = 0;
  double final_loss = 0;     // mean over the last tenth of the steps (at least one)
  double optimal_loss = 0;   // NaN when the data's entropy is unknown
  double seconds = 0;
  double tokens_per_second = 0;
};

// Trains `steps` steps (the job's steps when 0), printing one line every
// `log_every` steps (and the first and last).
TrainingReport trainOnCpu(const Plan& plan, int steps, int log_every, std::FILE* out);

}  // namespace tandem::cli
