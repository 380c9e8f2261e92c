#pragma once
// Training on the CPU reference executor with per-step progress lines, shared
// by `tandem train` and `tandem demo`.

#include <cstdio>
#include <string>

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

// Checkpoints of a CPU training (engine/checkpoint/checkpoint.h).
struct CheckpointOptions {
  std::string dir;     // empty: no checkpoints
  int every = 0;       // steps between checkpoints (0: none written)
  int keep = 0;        // complete checkpoints kept (0: all)
  bool resume = false; // continue from the newest complete checkpoint in dir
  // Every this many steps the data-parallel replicas' parameters are
  // hashed and compared (engine/checkpoint/consistency.h); a mismatch stops
  // the training with an error naming the ranks and the tensor. 0: never.
  int check_replicas_every = 0;
  // Tests of that check: after step flip_after_step, one bit of rank
  // flip_rank's first parameter is flipped (-1: never).
  int flip_rank = -1, flip_after_step = -1;
};

// Trains up to step `steps` (the job's steps when 0), printing one line
// every `log_every` steps (and the first and last). With checkpoints: the
// newest complete one resumed first (the steps already done are not run
// again), one written every `every` steps on a thread of its own.
TrainingReport trainOnCpu(const Plan& plan, int steps, int log_every, std::FILE* out,
                          const CheckpointOptions& checkpoints = {});

}  // namespace tandem::cli
