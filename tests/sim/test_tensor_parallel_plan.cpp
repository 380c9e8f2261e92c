// The simulator replays a tensor-parallel plan: each "tp" group's
// all-reduces (the row-parallel sums in the forward, the input-gradient
// sums in the backward, the norm's) run among the group's ranks, and the
// data-parallel buckets among the ranks at one place of every replica.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// GPT-2 350M's shape (16 heads), 8 ranks.
JobSpec gpt2Medium(int tp) {
  JobSpec job = defaultJob();
  job.model.layers = 24;
  job.model.hidden = 1024;
  job.model.heads = 16;
  job.training.micro_batch = 8;
  job.parallel.tensor_parallel = tp;
  job.parallel.data_parallel = 8 / tp;
  return job;
}

int64_t collectivesOf(const Plan& plan, const SimResult& r, const std::string& group) {
  return std::count_if(r.collectives.begin(), r.collectives.end(),
                       [&](const SimCollective& c) { return plan.groups.at(size_t(c.group)).name == group; });
}

}  // namespace

TEST_CASE("a tensor-parallel plan replays its group collectives, the same with and without symmetry", "[engine][tp]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const Plan whole = buildPlan(gpt2Medium(1));
  const Plan split = buildPlan(gpt2Medium(4));
  const SimResult a = simulatePlan(whole, topo, cost);
  const SimResult b = simulatePlan(split, topo, cost);
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult b_all = simulatePlan(split, topo, cost, all_ranks);
  CHECK(b.stats.symmetric);
  CHECK_FALSE(b_all.stats.symmetric);
  CHECK(b.step_ns == b_all.step_ns);
  CHECK(simulatePlan(split, topo, cost).step_ns == b.step_ns);  // deterministic

  // Per group and step: 2 sums per block in the forward and 2 in the
  // backward; the vocabulary split's embedding sum, loss statistics and LM
  // head input gradient; the norm's; two groups of 4 ranks.
  const int64_t layers = split.job.model.layers;
  CHECK(collectivesOf(split, b_all, "tp") == 2 * (4 * layers + 4));
  // The buckets' all-reduces run in each of the 4 data-parallel groups.
  CHECK(collectivesOf(split, b_all, "dp") == 4 * int64_t(split.programs[0].buckets.size()));
  CHECK(collectivesOf(whole, a, "tp") == 0);

  // A rank computes a quarter of each block and of the LM head, keeps a
  // quarter of the weights and of most activations, and waits
  // for the group's sums, which the compute stream cannot hide.
  const SimRankSummary sa = summarizeRank(a, 0), sb = summarizeRank(b, 0);
  INFO("tp 1: compute " << sa.compute_ns << " ns, comm " << sa.comm_ns << ", exposed " << sa.exposed_comm_ns
                        << "; tp 4: compute " << sb.compute_ns << ", comm " << sb.comm_ns << ", exposed "
                        << sb.exposed_comm_ns);
  CHECK(sb.exposed_p2p_ns == 0);  // no pipeline: no sends or receives
  CHECK(sb.compute_ns < sa.compute_ns / 2);
  CHECK(sb.peak_memory_bytes < sa.peak_memory_bytes / 2);
  CHECK(sb.exposed_comm_ns > sa.exposed_comm_ns);
}

TEST_CASE("a sequence-parallel plan replays its gathers and scatters, the same with and without symmetry",
          "[engine][tp][sp]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const Plan tp = buildPlan(gpt2Medium(4));
  JobSpec job = gpt2Medium(4);
  job.parallel.sequence_parallel = true;
  const Plan sp = buildPlan(job);
  const SimResult a = simulatePlan(tp, topo, cost);
  const SimResult b = simulatePlan(sp, topo, cost);
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult b_all = simulatePlan(sp, topo, cost, all_ranks);
  CHECK(b.stats.symmetric);
  CHECK(b.step_ns == b_all.step_ns);

  // Per group and step: each all-reduce of the tensor-parallel plan but the
  // loss statistics' gather and the norm's becomes an all-gather and a
  // reduce-scatter; the LayerNorms' 4 weight and bias gradients per block
  // and the final LayerNorm's 2 are summed; two groups of 4 ranks.
  const int64_t layers = job.model.layers;
  CHECK(collectivesOf(tp, a, "tp") == 4 * layers + 4);  // symmetric: one group's
  CHECK(collectivesOf(sp, b, "tp") == 2 * (4 * layers + 2) + 2 + 4 * layers + 2);
  CHECK(collectivesOf(sp, b_all, "tp") == 2 * collectivesOf(sp, b, "tp"));

  // The LayerNorms and residual adds run on a quarter of the tokens, and
  // their activations are kept for a quarter.
  const SimRankSummary sa = summarizeRank(a, 0), sb = summarizeRank(b, 0);
  INFO("tp 4: compute " << sa.compute_ns << " ns, peak " << sa.peak_memory_bytes << "; with sequence parallelism "
                        << sb.compute_ns << ", " << sb.peak_memory_bytes);
  CHECK(sb.compute_ns < sa.compute_ns);
  CHECK(sb.peak_memory_bytes < sa.peak_memory_bytes);
}
