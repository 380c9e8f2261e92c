// The simulator replays a Llama plan: RMSNorm, grouped-query attention and
// SwiGLU tasks take roofline time like the GPT-2 kernels they resemble, and
// 3D layouts replay the same with and without symmetry.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "engine/planner.h"
#include "simulator/cost_model.h"
#include "simulator/engine.h"
#include "simulator/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// Llama 2 7B's shape, 4 blocks, micro-batch 1.
JobSpec smallLlama() {
  JobSpec job = parseJob(std::string(builtinJobText("llama2-7b")), "llama2-7b");
  job.model.layers = 4;
  job.training.grad_accum = 2;
  return job;
}

}  // namespace

TEST_CASE("a Llama plan replays, its kernels timed by the roofline", "[engine][llama]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const Plan plan = buildPlan(smallLlama());
  const SimResult r = simulatePlan(plan, topo, cost);
  CHECK(r.step_ns > 0);
  // Every RMSNorm, SwiGLU and attention task took time.
  const RankPlan& rp = plan.programs[0];
  int seen = 0;
  for (const SimActivity& a : r.ranks[0].activities) {
    const Task& t = rp.tasks.at(size_t(a.task));
    if (t.op == OpKind::RmsNorm || t.op == OpKind::SwiGlu || t.op == OpKind::SwiGluBwd ||
        t.op == OpKind::RmsNormBwd || t.op == OpKind::Attention) {
      INFO(t.name);
      CHECK(a.end_ns > a.start_ns);
      ++seen;
    }
  }
  CHECK(seen > 0);
  // Grouped-query attention: fewer key/value heads read less, the same
  // products; the step is no longer.
  JobSpec gqa = smallLlama();
  gqa.model.kv_heads = 8;
  CHECK(simulatePlan(buildPlan(gqa), topo, cost).step_ns <= r.step_ns);
}

TEST_CASE("a 3D-parallel Llama replays the same with and without symmetry", "[engine][llama][pp][tp]") {
  JobSpec job = smallLlama();
  job.model.kv_heads = 8;
  job.parallel = ParallelSpec{};
  job.parallel.tensor_parallel = 4;
  job.parallel.sequence_parallel = true;
  job.parallel.pipeline_parallel = 2;
  job.parallel.data_parallel = 2;
  job.training.grad_accum = 4;
  const Plan plan = buildPlan(job);
  const Topology topo = loadTopology("2xdgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult sym = simulatePlan(plan, topo, cost);
  const SimResult full = simulatePlan(plan, topo, cost, all_ranks);
  CHECK(sym.stats.symmetric);
  CHECK(sym.step_ns == full.step_ns);
}
