// The planner's choices that fit a memory budget, with sharded parameters
// (ZeRO-3) as a lever of data-parallel jobs.
#include <catch2/catch.hpp>

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
