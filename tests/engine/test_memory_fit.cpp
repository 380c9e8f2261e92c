// The planner's choices that fit a memory budget, with sharded parameters
// (ZeRO-3) as a lever of data-parallel jobs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "engine/memory/memory_fit.h"
#include "engine/plan/planner.h"

using namespace tandem;

TEST_CASE("Choices that fit offer sharded parameters where they allow a larger micro-batch",
          "[planner][memory_fit][shard]") {
  JobSpec job = defaultJob();  // GPT-2 124M, data parallel 8, micro-batch 16
  REQUIRE(job.parallel.data_parallel > 1);
  auto none = [](const Plan&) { return int64_t(0); };
  JobSpec sharded = job;
  sharded.parallel.shard_parameters = true;
  const int64_t whole = buildPlan(job).programs[0].memory.arena_bytes;
  const int64_t zero3 = buildPlan(sharded).programs[0].memory.arena_bytes;
  REQUIRE(zero3 < whole);

  // Exactly the sharded job's arena: without recompute only sharding keeps
  // micro-batch 16.
  const std::vector<FittingChoice> fits = choicesThatFit(job, zero3, none);
  std::map<RecomputePolicy, int> unsharded_mb;
  bool offered = false;
  for (const FittingChoice& f : fits) {
    INFO(f.text(job));
    CHECK(f.bytes <= zero3);
    const JobSpec j = f.appliedTo(job);
    CHECK(j.parallel.shard_parameters == f.shard_parameters);
    CHECK(buildPlan(j).programs[0].memory.arena_bytes == f.bytes);
    if (!f.shard_parameters) {
      unsharded_mb[f.policy] = f.micro_batch;
      CHECK(f.text(job).find("shard_parameters") == std::string::npos);
      continue;
    }
    CHECK(f.text(job).find("parallel.shard_parameters=true") != std::string::npos);
    // Offered only above what the same policy reaches unsharded.
    CHECK(f.micro_batch > unsharded_mb[f.policy]);
    if (f.policy == RecomputePolicy::None && f.micro_batch == 16 && f.lm_head_chunks == 1) {
      offered = true;
      CHECK(f.bytes == zero3);
    }
  }
  CHECK(offered);

  // One rank has nothing to shard: no such choice.
  JobSpec one = job;
  one.parallel.data_parallel = 1;
  for (const FittingChoice& f : choicesThatFit(one, zero3, none)) CHECK_FALSE(f.shard_parameters);
  // A job whose parameters are sharded already is offered nothing else of the kind.
  for (const FittingChoice& f : choicesThatFit(sharded, zero3 / 2, none)) CHECK(f.shard_parameters);
}

TEST_CASE("More micro-batches than the steady state's plan the same arena", "[planner][memory_fit]") {
  // The choices are planned with accumulationForPeak's micro-batches; every
  // schedule here must need what its many-micro-batch job needs.
  auto arena = [](const JobSpec& j) {
    int64_t most = 0;
    for (const RankPlan& p : buildPlan(j).programs) most = std::max(most, p.memory.arena_bytes);
    return most;
  };
  struct Case {
    const char* name;
    JobSpec job;
  };
  std::vector<Case> cases;
  JobSpec dp = defaultJob();
  dp.training.grad_accum = 24;
  dp.training.micro_batch = 2;
  cases.push_back({"data parallel", dp});
  JobSpec zero2 = dp;
  zero2.parallel.shard_optimizer = true;
  zero2.parallel.shard_gradients = true;
  cases.push_back({"ZeRO-2", zero2});
  JobSpec zero3 = dp;
  zero3.parallel.shard_parameters = true;
  zero3.comm.reduce_every_micro_batch = true;
  cases.push_back({"ZeRO-3 reducing every micro-batch", zero3});
  JobSpec pp = defaultJob();
  pp.parallel.data_parallel = 2;
  pp.parallel.pipeline_parallel = 4;
  pp.training.micro_batch = 2;
  pp.training.grad_accum = 40;
  cases.push_back({"1F1B over 4 stages", pp});
  JobSpec interleaved = pp;
  interleaved.parallel.pipeline_chunks = 3;
  interleaved.training.grad_accum = 36;
  cases.push_back({"interleaved 1F1B, 3 chunks", interleaved});
  for (Case& c : cases) {
    INFO(c.name);
    JobSpec few = c.job;
    few.training.grad_accum = accumulationForPeak(c.job);
    REQUIRE(few.training.grad_accum < c.job.training.grad_accum);
    CHECK(arena(few) == arena(c.job));
    // and no fewer: one micro-batch less than the steady state may need less.
    CHECK(accumulationForPeak(few) == few.training.grad_accum);
  }
}
