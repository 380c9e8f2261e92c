// The simulator replays a sharded-optimizer (ZeRO-1) plan: reduce-scatters
// in the backward, all-gathers at the start of the step and after the last
// bucket's AdamW, and an optimizer phase a rank does for its shard only.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

JobSpec gpt2Dp(int ranks, bool sharded, bool parameters = false) {
  JobSpec job = defaultJob();  // GPT-2 124M
  job.parallel.data_parallel = ranks;
  job.parallel.shard_optimizer = sharded;
  job.parallel.shard_parameters = parameters;
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

TEST_CASE("gathering the tied embedding's gradient moves its bucket's reduce-scatter into the backward",
          "[engine][shard]") {
  const Topology topo = loadTopology("h200x2-nv18");
  const RooflineCostModel cost;
  JobSpec on = gpt2Dp(2, true);
  on.training.micro_batch = 16;
  on.comm.gather_embedding_gradient = true;
  JobSpec off = on;
  off.comm.gather_embedding_gradient = false;
  const Plan pon = buildPlan(on), poff = buildPlan(off);
  const SimResult son = simulatePlan(pon, topo, cost), soff = simulatePlan(poff, topo, cost);

  // Start and end of the last bucket's reduce-scatter and of the embedding backward on rank 0.
  struct Span {
    int64_t start = -1, end = -1;
  };
  auto spanOf = [](const Plan& p, const SimResult& r, const std::string& name) {
    const RankPlan& rp = p.programs[0];
    Span s;
    for (const SimActivity act : r.ranks[0].activities)
      if (rp.tasks[size_t(act.task)].name == name) s = {act.start_ns, act.end_ns};
    return s;
  };
  const std::string scatter = "comm.reducescatter.bucket" + std::to_string(pon.programs[0].buckets.size() - 1);
  const Span rs_on = spanOf(pon, son, scatter), emb_on = spanOf(pon, son, "embed.bwd.mb0");
  const Span rs_off = spanOf(poff, soff, scatter), emb_off = spanOf(poff, soff, "embed.bwd.mb0");
  REQUIRE((rs_on.start >= 0 && emb_on.start >= 0 && rs_off.start >= 0 && emb_off.start >= 0));
  INFO("gathered: reduce-scatter " << rs_on.start << ".." << rs_on.end << " ns, embedding backward " << emb_on.start
                                   << "; not gathered: reduce-scatter from " << rs_off.start << " ns, step "
                                   << soff.step_ns << " against " << son.step_ns);
  CHECK(rs_on.end < emb_on.start);    // long done when the embedding backward runs
  CHECK(rs_off.start >= emb_off.end);  // after it, nothing left to hide it behind
  CHECK(son.step_ns < soff.step_ns);
}

TEST_CASE("a sharded-parameter (ZeRO-3) plan replays its gathers beside the compute and holds less memory",
          "[engine][shard]") {
  const Topology topo = loadTopology("dgx-h200");
  const RooflineCostModel cost;
  const Plan zero1 = buildPlan(gpt2Dp(8, true));
  const Plan zero3 = buildPlan(gpt2Dp(8, true, true));
  const SimResult a = simulatePlan(zero1, topo, cost);
  const SimResult b = simulatePlan(zero3, topo, cost);

  int64_t gathers_planned = 0;
  for (const Task& t : zero3.programs[0].tasks) gathers_planned += t.op == OpKind::AllGather;
  const int64_t buckets = int64_t(zero3.programs[0].buckets.size());
  auto countOf = [](const SimResult& r, CollectiveOp op) {
    return int64_t(std::count_if(r.collectives.begin(), r.collectives.end(),
                                 [&](const SimCollective& c) { return c.op == op; }));
  };
  CHECK(gathers_planned > buckets);  // before the forward and again before the backward
  CHECK(countOf(b, CollectiveOp::AllGather) == gathers_planned);
  CHECK(countOf(b, CollectiveOp::ReduceScatter) == buckets);

  const SimRankSummary sa = summarizeRank(a, 0), sb = summarizeRank(b, 0);
  INFO("ZeRO-1 step " << a.step_ns << " ns, peak " << sa.peak_memory_bytes << "; ZeRO-3 step " << b.step_ns
                      << " ns, peak " << sb.peak_memory_bytes << ", exposed comm " << sb.exposed_comm_ns);
  CHECK(sb.peak_memory_bytes < sa.peak_memory_bytes);
  // More bytes gathered per step (twice the parameters) ...
  CHECK(sb.comm_ns > sa.comm_ns);
  // ... mostly beside the compute: the gathers of a step's forward and
  // backward are issued one bucket ahead, so their time is largely hidden.
  CHECK(sb.overlap_ns > sa.overlap_ns);
  CHECK(b.step_ns < a.step_ns * 11 / 10);
  // Deterministic, as every replay.
  CHECK(simulatePlan(zero3, topo, cost).step_ns == b.step_ns);
}

TEST_CASE("a hybrid-sharded plan replays with its shard and replica groups, the same with and without symmetry",
          "[engine][shard]") {
  const Topology topo = loadTopology("2xdgx-h100");
  const RooflineCostModel cost;
  JobSpec zero3 = gpt2Dp(16, true, true);
  JobSpec hybrid = zero3;
  hybrid.parallel.shard_group_size = 8;  // a host's GPUs
  const Plan p3 = buildPlan(zero3), ph = buildPlan(hybrid);
  const SimResult a = simulatePlan(p3, topo, cost);
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult b = simulatePlan(ph, topo, cost);
  const SimResult b_all = simulatePlan(ph, topo, cost, all_ranks);
  CHECK(b.stats.symmetric);
  CHECK_FALSE(b_all.stats.symmetric);
  CHECK(b.step_ns == b_all.step_ns);
  // Gathers and reduce-scatters stay on a host's NVLink; only the replicas'
  // all-reduces of gradient shards cross the network: less communication.
  const SimRankSummary sa = summarizeRank(a, 0), sb = summarizeRank(b, 0);
  INFO("ZeRO-3 comm " << sa.comm_ns << " ns, step " << a.step_ns << "; hybrid comm " << sb.comm_ns << " ns, step "
                      << b.step_ns);
  CHECK(sb.comm_ns < sa.comm_ns);
  // Optimizer state sharded 8 ways instead of 16.
  CHECK(sb.peak_memory_bytes > sa.peak_memory_bytes);
}
