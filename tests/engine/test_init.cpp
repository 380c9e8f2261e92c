// Parameter initialisation drawn on several threads: the same values, in the
// same order, as one thread draws them.
#include <catch2/catch.hpp>
#include <algorithm>
#include <thread>
#include <vector>

#include "engine/numerics/init.h"
#include "engine/numerics/rng.h"
#include "engine/passes/buckets.h"
#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

TEST_CASE("Parameters drawn on worker threads arrive in order with the sequential values", "[init]") {
  const Plan plan = buildPlan(test::llamaJob(1, 1, 3));
  const RankPlan& rp = plan.programs.at(0);
  std::vector<const ParamInfo*> params;
  for (const ParamInfo& p : rp.params) params.push_back(&p);
  REQUIRE(params.size() > 8);
  for (int threads : {1, 3, 16}) {
    std::vector<std::string> order;
    std::vector<std::thread::id> callers;
    int mismatches = 0;
    forEachInitialParameter(plan.job, rp, params, 0, threads, [&](const ParamInfo& p, const std::vector<float>& v) {
      order.push_back(p.name);
      callers.push_back(std::this_thread::get_id());
      if (v != initialParameterValues(plan.job, rp, p, 0)) ++mismatches;
    });
    INFO("threads " << threads);
    CHECK(mismatches == 0);
    REQUIRE(order.size() == params.size());
    for (size_t i = 0; i < params.size(); ++i) CHECK(order[i] == params[i]->name);
    // `use` runs on the calling thread (the executor's CUDA calls are made there).
    for (const std::thread::id& id : callers) CHECK(id == std::this_thread::get_id());
  }
  // Nothing to draw: `use` is never called.
  int calls = 0;
  forEachInitialParameter(plan.job, rp, {}, 0, 4, [&](const ParamInfo&, const std::vector<float>&) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("Normal values drawn in chunks on several threads are one generator's sequence", "[init]") {
  const int64_t n = (int64_t(3) << 20) + 12345;  // three chunks of a million values or more, the last ragged
  SplitMix64 rng(0xC0FFEEull);
  std::vector<float> sequential(static_cast<size_t>(n));
  for (float& v : sequential) v = float(0.02 * rng.normal());
  for (int threads : {1, 2, 4, 7}) {
    std::vector<float> chunked(static_cast<size_t>(n), -1.f);
    fillNormal(chunked.data(), n, 0xC0FFEEull, 0.02, threads);
    INFO("threads " << threads);
    CHECK(chunked == sequential);
  }
  // skip(n) is n calls of next().
  SplitMix64 a(7), b(7);
  for (int i = 0; i < 1000; ++i) a.next();
  b.skip(1000);
  CHECK(a.next() == b.next());
}

TEST_CASE("A master shard draws only its part of each whole parameter: the values cut from the whole", "[init]") {
  // Data parallel 4 with sharded parameters, and data parallel 2 over a
  // tensor-parallel pair (slices are drawn whole and cut).
  for (int tp : {1, 2}) {
    JobSpec job = test::llamaJob(tp == 1 ? 4 : 2, 1, 2);
    job.parallel.tensor_parallel = tp;
    job.parallel.shard_parameters = true;
    job.training.precision = Precision::BF16;
    const Plan plan = buildPlan(job);
    const int world = job.parallel.data_parallel * tp;
    int shards_seen = 0;
    for (int rank = 0; rank < world; ++rank) {
      const RankPlan& rp = plan.forRank(rank);
      for (const GradBucket& b : rp.buckets) {
        if (b.param_shard < 0) continue;
        const std::vector<float> got = initialMasterShard(plan.job, rp, b, rank, shardCount(plan.job), 3);
        // The definition: each parameter's values (its slice under tensor
        // parallelism) placed in the bucket, the rank's shard cut out.
        const ShardRange shard = shardOf(plan.job.dataParallelRank(rank), shardCount(plan.job),
                                         rp.buffers.at(size_t(b.buffer)).elementCount());
        std::vector<float> want(size_t(shard.end - shard.begin), 0.0f);
        for (int pi : b.params) {
          const ParamInfo& p = rp.params.at(size_t(pi));
          const ShardSegment seg = segmentInShard(rp, p, shard);
          if (seg.to <= seg.from) continue;
          const std::vector<float> v = initialParameterValues(plan.job, rp, p, rank);
          std::copy(v.begin() + seg.from, v.begin() + seg.to, want.begin() + seg.shard_offset);
        }
        INFO("tensor parallel " << tp << ", rank " << rank << ", bucket " << b.buffer);
        CHECK(got == want);
        ++shards_seen;
      }
    }
    CHECK(shards_seen >= world);
  }
  // A range of the sequence is the sequence's values there.
  std::vector<float> whole(5000), part(1234, -1.f);
  fillNormal(whole.data(), 5000, 99, 0.5, 1);
  fillNormalRange(part.data(), 3000, 4234, 99, 0.5, 2);
  CHECK(std::equal(part.begin(), part.end(), whole.begin() + 3000));
}
