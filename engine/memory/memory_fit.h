#pragma once
// Choices of a job that fit a memory budget: the planner's answer when a
// job's plan does not fit on a GPU (`tandem run` prints them with the
// shortfall). Each choice is planned, so its size is the arena the
// executor would allocate, plus what the caller adds for the executor's own
// buffers.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "engine/spec/job.h"

namespace tandem {

struct FittingChoice {
  RecomputePolicy policy = RecomputePolicy::None;
  int micro_batch = 1;
  // Micro-batches per step: raised as the micro-batch is lowered, so that
  // the global batch (and with it the training) stays the job's
  // (accumulationKeepingBatch).
  int grad_accum = 1;
  int lm_head_chunks = 1;
  bool shard_parameters = false;
  int64_t bytes = 0;  // the plan's arena plus the caller's overhead
  // "recompute.policy=selective training.micro_batch=8
  // training.grad_accum=2 (61.2 GiB)", with training.grad_accum,
  // schedule.lm_head_chunks and parallel.shard_parameters where they differ
  // from `job`'s, and the global batch where it cannot stay the job's.
  std::string text(const JobSpec& job) const;
  // `job` with this choice made (per-layer recompute overrides dropped).
  JobSpec appliedTo(const JobSpec& job) const;
};

// The accumulation that keeps `job`'s global batch at `micro_batch`: the
// job's times job micro-batch / micro-batch, rounded up where it does not
// divide (the batch then grows a little, and the choice says so).
int accumulationKeepingBatch(const JobSpec& job, int micro_batch);

// The fewest micro-batches per step whose plan needs the memory `job`'s
// does: memory peaks once the schedule reaches its steady state (the
// micro-batches in flight of a pipeline stage, a buffer reused from the
// second micro-batch on), so more micro-batches only repeat it. At most
// 4 x pipeline_parallel (4 without a pipeline; a multiple of the stages,
// as interleaving asks), never more than the job's. The choices below are
// planned with it: a Llama 3.1 405B job of 384 micro-batches over 16
// stages took 19 s to plan and each choice as long; planned at 64 micro-
// batches the arena is the same (32 already reach it; tests: engine_tests
// "[memory_fit]").
int accumulationForPeak(const JobSpec& job);

// The most groups of tokens the LM head is split into when a choice needs
// it: on one H200 16 groups cost GPT-2 124M about 0.6 ms per GiB saved,
// selective recompute about 0.9 (docs/benchmarks.md).
inline constexpr int kMaxSuggestedLmHeadChunks = 16;

// For each recompute policy (none, selective, full; per-layer overrides
// dropped), the largest micro-batch, halving from the job's, whose plan
// with the job's lm_head_chunks, or else with the most groups up to
// kMaxSuggestedLmHeadChunks that split its tokens, needs at most `budget`
// bytes including `overhead(plan)`. A data-parallel job whose parameters
// are not sharded gets a second choice per policy with them sharded
// (ZeRO-3) where that allows a larger micro-batch. The job itself is not a
// choice.
std::vector<FittingChoice> choicesThatFit(const JobSpec& job, int64_t budget,
                                          const std::function<int64_t(const Plan&)>& overhead);

}  // namespace tandem
