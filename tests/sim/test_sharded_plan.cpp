// The simulator replays a sharded-optimizer (ZeRO-1) plan: reduce-scatters
// in the backward, all-gathers at the start of the step and after the last
// bucket's AdamW, and an optimizer phase a rank does for its shard only.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/planner.h"
#include "simulator/cost_model.h"
#include "simulator/engine.h"
#include "simulator/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

JobSpec gpt2Dp(int ranks, bool sharded) {
  JobSpec job = defaultJob();  // GPT-2 124M
  job.parallel.data_parallel = ranks;
  job.parallel.shard_optimizer = sharded;
  job.training.precision = Precision::BF16;
  return job;
}

}  // namespace

TEST_CASE("a sharded-optimizer plan replays with its collectives and a smaller optimizer phase", "[engine][shard]") {
  const Topology topo = loadTopology("dgx-h200");
  const RooflineCostModel cost;
  const Plan whole = buildPlan(gpt2Dp(8, false));
  const Plan sharded = buildPlan(gpt2Dp(8, true));
  const SimResult a = simulatePlan(whole, topo, cost);
  const SimResult b = simulatePlan(sharded, topo, cost);

  auto countOf = [](const SimResult& r, CollectiveOp op) {
    return std::count_if(r.collectives.begin(), r.collectives.end(),
                         [&](const SimCollective& c) { return c.op == op; });
  };
  const int64_t buckets = int64_t(sharded.programs[0].buckets.size());
  CHECK(countOf(b, CollectiveOp::ReduceScatter) == buckets);
  CHECK(countOf(b, CollectiveOp::AllGather) == buckets);
  CHECK(countOf(b, CollectiveOp::AllReduce) == 1);  // the squared norm
  CHECK(countOf(a, CollectiveOp::AllReduce) == buckets);

  const SimRankSummary sa = summarizeRank(a, 0), sb = summarizeRank(b, 0);
  // AdamW over 1/8 of the elements; the norm's all-reduce adds a little.
  CHECK(sb.optimizer_ns * 4 < sa.optimizer_ns);
  // Each rank holds 1/8 of the master weights and moments.
  CHECK(sb.peak_memory_bytes < sa.peak_memory_bytes);
  CHECK(b.step_ns < a.step_ns);

  // The all-gathers of every bucket but the last-completed one run before
  // the forward reaches the layers they feed: at the start of the step.
  const SimRank& r0 = b.ranks[0];
  int64_t first_forward_end = 0;
  for (const SimActivity act : r0.activities)
    if (act.phase == Phase::Forward) first_forward_end = std::max(first_forward_end, act.end_ns);
  int gathers_in_forward = 0;
  for (const SimCollective& c : b.collectives)
    if (c.op == CollectiveOp::AllGather && c.start_ns < first_forward_end) ++gathers_in_forward;
  CHECK(gathers_in_forward == buckets - 1);
}
