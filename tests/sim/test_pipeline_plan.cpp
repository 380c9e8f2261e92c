// The simulator replays a pipeline-parallel plan: one program per stage,
// each micro-batch's activations and gradients passed between the stages'
// ranks (send/receive), the 1F1B bubble where a stage waits for its
// neighbours.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// Eight blocks of GPT-2 350M's width and a small vocabulary, so that the
// stages (two blocks each) do about the same work.
JobSpec stagedJob(int micro_batches) {
  JobSpec job = defaultJob();
  job.model.layers = 8;
  job.model.hidden = 1024;
  job.model.heads = 16;
  job.model.vocab = 1024;
  job.training.micro_batch = 4;
  job.training.grad_accum = micro_batches;
  job.parallel.data_parallel = 2;
  job.parallel.pipeline_parallel = 4;
  return job;
}

}  // namespace

TEST_CASE("a pipeline plan replays with its transfers and the 1F1B bubble", "[engine][pp]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  for (int m : {4, 16}) {
    const Plan plan = buildPlan(stagedJob(m));
    const SimResult r = simulatePlan(plan, topo, cost, all_ranks);
    INFO(m << " micro-batches: step " << r.step_ns << " ns");
    CHECK(simulatePlan(plan, topo, cost, all_ranks).step_ns == r.step_ns);  // deterministic
    // Every send met its receive: 2 per micro-batch and boundary, per replica.
    auto transfers = [](const SimResult& x) {
      return std::count_if(x.collectives.begin(), x.collectives.end(),
                           [](const SimCollective& c) { return c.op == CollectiveOp::Send; });
    };
    CHECK(transfers(r) == 2 * m * 3 * 2);
    // One representative per stage (the ranks at replica 0, place 0) stands
    // for the others: the same step, the representatives' transfers only.
    const SimResult sym = simulatePlan(plan, topo, cost);
    CHECK(sym.stats.symmetric);
    CHECK(sym.step_ns == r.step_ns);
    CHECK(transfers(sym) == 2 * m * 3);
    // A middle stage computes for all but the bubble: (p - 1) / (m + p - 1)
    // of the step in the 1F1B schedule, a little more with the transfers
    // and the optimizer's tail.
    const SimRankSummary s = summarizeRank(r, plan.job.rankAt(1, 0, 0));
    const double bubble = 1.0 - double(s.compute_ns) / double(r.step_ns);
    const double ideal = 3.0 / (m + 3.0);
    INFO("bubble " << bubble << ", 1F1B's " << ideal);
    CHECK(bubble >= ideal - 0.05);
    CHECK(bubble <= ideal + 0.10);
    // The stage spends the larger part of the bubble waiting at its sends
    // and receives (`tandem report` and `simulate`: p2p wait); the rest at
    // the end of the step, in the norm's sum over the stages, which waits
    // for the first stage's last backward.
    CHECK(s.exposed_p2p_ns <= s.exposed_comm_ns);
    CHECK(double(s.exposed_p2p_ns) > 0.5 * bubble * double(r.step_ns));
  }
}

TEST_CASE("fewer blocks on the stage with the LM head shorten a pipeline's step", "[engine][pp]") {
  // GPT-2 350M's 24 blocks and 50k-token LM head in 4 stages: the last
  // stage's head weighs about three blocks.
  JobSpec job = defaultJob();
  job.model.layers = 24;
  job.model.hidden = 1024;
  job.model.heads = 16;
  job.parallel.data_parallel = 2;
  job.parallel.pipeline_parallel = 4;
  job.training.grad_accum = 8;
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const SimResult even = simulatePlan(buildPlan(job), topo, cost);
  job.parallel.pipeline_layers = {7, 7, 7, 3};
  const Plan plan = buildPlan(job);
  CHECK(plan.programs[3].tasks.size() < plan.programs[0].tasks.size());
  const SimResult balanced = simulatePlan(plan, topo, cost);
  INFO("even " << even.step_ns << " ns, 7-7-7-3 " << balanced.step_ns << " ns");
  CHECK(balanced.step_ns < even.step_ns * 9 / 10);
}

TEST_CASE("interleaved chunks shrink the pipeline bubble", "[engine][pp][interleaved]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  // 4 stages, 4 micro-batches: a bubble of 3/7 without chunks.
  const Plan plain = buildPlan(stagedJob(4));
  JobSpec job = stagedJob(4);
  job.parallel.pipeline_chunks = 2;  // 8 chunks of one block
  const Plan interleaved = buildPlan(job);
  const SimResult a = simulatePlan(plain, topo, cost, all_ranks);
  const SimResult b = simulatePlan(interleaved, topo, cost, all_ranks);
  const SimResult b_sym = simulatePlan(interleaved, topo, cost);
  CHECK(b_sym.stats.symmetric);
  CHECK(b_sym.step_ns == b.step_ns);
  // Every chunk boundary's transfers, the last stage's back to the first
  // included: 2 per micro-batch and boundary (8 chunks: 7), per replica.
  CHECK(std::count_if(b.collectives.begin(), b.collectives.end(),
                      [](const SimCollective& c) { return c.op == CollectiveOp::Send; }) == 2 * 4 * 7 * 2);
  // A middle stage idles for (p - 1) / (v m + p - 1) of the step in the
  // interleaved schedule (Narayanan et al. 2021): 3/11 against 3/7.
  auto bubble = [&](const Plan& plan, const SimResult& r) {
    const SimRankSummary s = summarizeRank(r, plan.job.rankAt(1, 0, 0));
    return 1.0 - double(s.compute_ns) / double(r.step_ns);
  };
  INFO("plain: step " << a.step_ns << " ns, bubble " << bubble(plain, a) << "; interleaved: step " << b.step_ns
                      << " ns, bubble " << bubble(interleaved, b));
  // Not below the schedule's bubble; and at least half of the reduction it
  // promises, the rest going to the transfers, twice as many on the
  // critical path as without chunks (the model says 3/7 -> 3/11).
  const double ideal_plain = 3.0 / 7, ideal = 3.0 / 11;
  CHECK(b.step_ns < a.step_ns * 9 / 10);
  const SimRankSummary sa = summarizeRank(a, plain.job.rankAt(1, 0, 0)), sb = summarizeRank(b, job.rankAt(1, 0, 0));
  CHECK(sb.exposed_p2p_ns < sa.exposed_p2p_ns);
  CHECK(bubble(interleaved, b) >= ideal - 0.05);
  CHECK(bubble(interleaved, b) < bubble(plain, a) - (ideal_plain - ideal) / 2);
}

TEST_CASE("pipeline transfers split over a tensor-parallel group cross the hosts' links once", "[engine][pp][tp]") {
  // Two stages of 8-way tensor parallelism, one per host: whole transfers
  // move each activation 8 times over the network, split ones once, and
  // the gathers run over NVLink.
  JobSpec job = defaultJob();
  job.model.layers = 4;
  job.model.hidden = 4096;
  job.model.heads = 32;
  job.model.vocab = 50304;
  job.training.micro_batch = 4;
  job.training.grad_accum = 8;
  job.parallel.data_parallel = 1;
  job.parallel.tensor_parallel = 8;
  job.parallel.pipeline_parallel = 2;
  JobSpec split = job;
  split.comm.pipeline_scatter_gather = true;
  const Topology topo = loadTopology("2xdgx-h100");
  const RooflineCostModel cost;
  const Plan whole_plan = buildPlan(job), split_plan = buildPlan(split);
  const SimResult whole = simulatePlan(whole_plan, topo, cost), parts = simulatePlan(split_plan, topo, cost);
  auto p2pBytes = [](const Plan& plan, const SimResult& r) {
    int64_t bytes = 0;
    for (const SimCollective& c : r.collectives)
      if (plan.groups.at(size_t(c.group)).name.rfind("pp", 0) == 0) bytes += c.bytes;
    return bytes;
  };
  CHECK(p2pBytes(split_plan, parts) * 8 == p2pBytes(whole_plan, whole));
  INFO("whole " << whole.step_ns << " ns, split " << parts.step_ns << " ns");
  CHECK(parts.step_ns < whole.step_ns);
}

TEST_CASE("pipelines across hosts: one representative per stage agrees with every rank simulated", "[engine][pp]") {
  // Stages on different halves of a 128-host cluster: the pipeline pairs'
  // sends cross the spines at once. On InfiniBand (D-mod-K routing) none
  // collides and the representatives' step is every rank's. On Ethernet
  // (ECMP hashing) some collide and do not all take as long; the
  // representatives' transfers wait for the shadows of the ones they stand
  // for that share their NICs (replay.cpp, findShadowGroups), as a
  // collective waits for its slowest member (without them the symmetric
  // step was 22% short there).
  JobSpec job = defaultJob();
  job.model.layers = 2;
  job.parallel.tensor_parallel = 4;
  job.parallel.pipeline_parallel = 2;
  job.parallel.data_parallel = 128;
  job.training.grad_accum = 2;
  refreshJobText(job);
  const Plan plan = buildPlan(job);
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  Topology ib = makeDgxH100Cluster(128);
  const SimResult ib_full = simulatePlan(plan, ib, cost, all_ranks), ib_sym = simulatePlan(plan, ib, cost);
  CHECK(ib_sym.step_ns == ib_full.step_ns);
  Topology ethernet = ib;
  for (Link& l : ethernet.links)
    if (l.kind == LinkKind::InfiniBand) l.kind = LinkKind::Ethernet;
  const SimResult full = simulatePlan(plan, ethernet, cost, all_ranks);
  const SimResult sym = simulatePlan(plan, ethernet, cost);
  REQUIRE(sym.stats.symmetric);
  CHECK(sym.stats.shadow_transfers > 0);
  INFO("InfiniBand " << ib_full.step_ns << " ns; Ethernet: every rank " << full.step_ns << " ns, representatives "
                     << sym.step_ns << " ns");
  CHECK(full.step_ns > ib_full.step_ns);  // the collisions
  CHECK(std::abs(double(sym.step_ns) / double(full.step_ns) - 1.0) < 0.03);
}
