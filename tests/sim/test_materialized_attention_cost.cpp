// The simulator times a materialized attention (schedule.materialized_attention)
// kernel by kernel: its batched GEMMs and softmax passes over the [B, H, T, T]
// score matrix, and with dropout on the probabilities (model.attention_dropout)
// one elementwise pass more each way, bound by HBM.
#include <catch2/catch.hpp>

#include "engine/plan/planner.h"
#include "sim_fixtures.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// GPT 24/2304/24 (Megatron-LM SC21's first weak-scaling row), micro-batch
// 2, sequence 2048, one block.
JobSpec megatronBlock(double dropout) {
  JobSpec job = defaultJob();
  job.model.layers = 1;
  job.model.hidden = 2304;
  job.model.heads = 24;
  job.model.seq_len = 2048;
  job.model.vocab = 51200;
  job.training.micro_batch = 2;
  job.training.precision = Precision::BF16;
  job.parallel.data_parallel = 1;
  job.schedule.materialized_attention = true;
  job.model.attention_dropout = dropout;
  return job;
}

const Task& first(const Plan& plan, OpKind op) { return testing::firstTaskOf(plan, op); }

}  // namespace

TEST_CASE("a materialized attention's dropout costs a pass over the scores each way",
          "[engine][attention][dropout]") {
  const Topology topo = loadTopology("hgx-a100");
  const DeviceSpec& a100 = topo.devices.at(0);
  const RooflineCostModel cost;
  const Plan plain = buildPlan(megatronBlock(0)), dropped = buildPlan(megatronBlock(0.1));
  for (OpKind op : {OpKind::Attention, OpKind::AttentionBwd}) {
    INFO(toString(op));
    const Task& without = first(plain, op);
    const Task& with = first(dropped, op);
    const OpAttrs& a = with.attrs;
    const double scores = double(a.b) * double(a.h) * double(a.t) * double(a.t);
    // Two bf16 bytes in, two out and a byte of mask, at no more than HBM's rate.
    const double pass_ns = 5 * scores / a100.hbm_gbps;
    const int64_t added = cost.taskNs(with, a100, Precision::BF16) - cost.taskNs(without, a100, Precision::BF16);
    CHECK(double(added) >= pass_ns);
    CHECK(double(added) <= 2 * pass_ns);
  }
  const int64_t step_plain = simulatePlan(plain, topo, cost).step_ns;
  const int64_t step_dropped = simulatePlan(dropped, topo, cost).step_ns;
  CHECK(step_dropped > step_plain);
}
