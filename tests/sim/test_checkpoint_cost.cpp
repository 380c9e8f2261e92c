// What `tandem simulate --checkpoint-every` estimates checkpoints cost
// (simulator/pipeline/checkpoint_cost.h): the bytes a checkpoint holds, the
// copy over each GPU's PCIe link, the write beside the next steps and the
// wait when it outlasts them.
#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "simulator/pipeline/checkpoint_cost.h"
#include "simulator/topology/topology_presets.h"
#include "tests/sim/sim_fixtures.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// One SimRank per rank of the plan on device r, the step `step_ns` long.
SimResult stepOf(const Plan& plan, int64_t step_ns) {
  SimResult r;
  r.step_ns = step_ns;
  for (int rank = 0; rank < plan.world_size; ++rank) {
    SimRank s;
    s.rank = rank;
    s.device = rank;
    r.ranks.push_back(s);
  }
  return r;
}

int64_t savedBytes(const RankPlan& program) {
  int64_t n = 0;
  for (int id : checkpoint::savedBuffers(program, false)) n += program.buffers[size_t(id)].bytes;
  return n;
}

}  // namespace

TEST_CASE("checkpoint cost: copy over PCIe, write beside the steps, the wait when it outlasts them",
          "[sim][checkpoint]") {
  const JobSpec job = parseJob(std::string(builtinJobText("gpt2-124m-dp8")), "gpt2-124m-dp8", {});
  const Plan plan = buildPlan(job);  // data parallel 8, unsharded
  const Topology topo = loadTopology("dgx-h100");  // each GPU on a 55 GB/s PCIe link, one host
  const int64_t bytes = savedBytes(plan.forRank(0));
  REQUIRE(bytes > 0);
  CheckpointCostSettings s;
  s.every = 10;
  s.host_write_gbps = 2.0;
  // A step of 100 ms: ten of them (1 s) against the host's 8 ranks' write.
  const CheckpointCostEstimate e = estimateCheckpointCost(plan, topo, stepOf(plan, 100'000'000), s);
  CHECK(e.rank_bytes == bytes);
  CHECK(e.host_bytes == 8 * bytes);
  CHECK(e.copy_gbps == Approx(55.0));
  CHECK_FALSE(e.copy_gbps_assumed);
  CHECK(e.copy_s == Approx(double(bytes) / 55e9));
  CHECK(e.write_s == Approx(8.0 * double(bytes) / 2e9));  // the host's storage, not one writer, is the limit
  CHECK(e.between_s == Approx(1.0));
  CHECK(e.wait_s == Approx(e.write_s - 1.0));
  CHECK(e.per_checkpoint_s == Approx(e.copy_s + e.wait_s));
  CHECK(e.per_step_s == Approx(e.per_checkpoint_s / 10));
  CHECK(e.overhead_pct == Approx(100.0 * e.per_step_s / 0.1));
  CHECK_THAT(describeCheckpointCost(e), Catch::Contains("checkpoint every 10 steps") &&
                                            Catch::Contains("the next copy waits"));

  // Fast storage: one writer's rate is the limit, and a write the steps
  // cover costs nothing but the copy.
  s.host_write_gbps = 1000;
  s.every = 1000;
  const CheckpointCostEstimate fast = estimateCheckpointCost(plan, topo, stepOf(plan, 100'000'000), s);
  CHECK(fast.write_s == Approx(double(bytes) / 4.5e9));
  CHECK(fast.wait_s == 0);
  CHECK(fast.per_checkpoint_s == Approx(fast.copy_s));

  // No PCIe link in the topology: the fallback rate, said so.
  const CheckpointCostEstimate assumed =
      estimateCheckpointCost(plan, testing::ringTopology(8, 100, 1000), stepOf(plan, 100'000'000), s);
  CHECK(assumed.copy_gbps_assumed);
  CHECK(assumed.copy_gbps == Approx(25.0));
  CHECK_THAT(describeCheckpointCost(assumed), Catch::Contains("assumed"));

  // Bad settings are refused.
  s.every = 0;
  CHECK_THROWS_AS(estimateCheckpointCost(plan, topo, stepOf(plan, 1), s), std::invalid_argument);
  s.every = 1;
  s.host_write_gbps = 0;
  CHECK_THROWS_AS(estimateCheckpointCost(plan, topo, stepOf(plan, 1), s), std::invalid_argument);
}
