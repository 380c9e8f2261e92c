// The materialized attention (schedule.materialized_attention): the same
// arithmetic as the fused attention with the probabilities kept instead of
// each row's log-sum-exp, so the CPU reference trains it to the same
// gradients; the plan counts the full T x T products and the score
// matrices' passes and memory.
#include <catch2/catch.hpp>

#include <string>

#include "engine/cpu/executor.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_compare.h"
#include "test_jobs.h"

using namespace tandem;

TEST_CASE("a materialized attention trains as the fused one", "[executor][attention]") {
  for (bool llama : {false, true})
    for (RecomputePolicy recompute : {RecomputePolicy::None, RecomputePolicy::Full}) {
      JobSpec fused = llama ? test::llamaJob(2, 2) : test::splittableJob(2, 2);
      fused.recompute.policy = recompute;
      JobSpec materialized = fused;
      materialized.schedule.materialized_attention = true;
      INFO((llama ? "llama" : "gpt-2") << " recompute " << toString(recompute));
      cpu::CpuExecutor a(buildPlan(fused));
      cpu::CpuExecutor b(buildPlan(materialized));
      a.computeGradients();
      b.computeGradients();
      const RankPlan& rp = b.plan().programs[0];
      for (size_t i = 0; i < rp.params.size(); ++i) {
        INFO(rp.params[i].name);
        CHECK(test::relativeDifference(b.readBuffer(0, rp.params[i].grad),
                                       a.readBuffer(0, a.plan().programs[0].params[i].grad)) <= 1e-5);
      }
      for (int step = 0; step < 2; ++step) CHECK(b.step().loss == Approx(a.step().loss).epsilon(1e-6));
    }
}

TEST_CASE("a materialized attention plans the whole score matrix", "[plan][attention]") {
  JobSpec job = test::splittableJob(1, 1);
  job.model.seq_len = 64;
  const Plan fused = buildPlan(job);
  job.schedule.materialized_attention = true;
  const Plan materialized = buildPlan(job);
  REQUIRE(gpuRunRefusal(materialized).has_value());
  CHECK_THAT(*gpuRunRefusal(materialized), Catch::Contains("schedule.materialized_attention"));
  const RankPlan& rp = materialized.programs[0];
  auto taskOf = [](const RankPlan& p, OpKind op) -> const Task& {
    for (const Task& t : p.tasks)
      if (t.op == op) return t;
    throw std::logic_error("no such task");
  };
  const Task& fwd = taskOf(rp, OpKind::Attention);
  const Task& fused_fwd = taskOf(fused.programs[0], OpKind::Attention);
  const OpAttrs& a = fwd.attrs;
  // The probabilities [B, H, T, T] kept for the backward, in the activations' type.
  const Buffer& probs = rp.buffers[size_t(fwd.writes[1])];
  CHECK(probs.elementCount() == a.b * a.h * a.t * a.t);
  CHECK(probs.dtype == DType::F32);  // this job is fp32
  // Twice the fused kernel's products (no causal skipping), and the score
  // matrices' passes beyond what the fused kernel moves.
  CHECK(fwd.flops == Approx(2 * fused_fwd.flops));
  CHECK(fwd.bytes_read + fwd.bytes_written > fused_fwd.bytes_read + fused_fwd.bytes_written + 3 * probs.bytes);
  int readers = 0;  // the backward of the same block reads them
  for (const Task& t : rp.tasks)
    if (t.op == OpKind::AttentionBwd && t.layer == fwd.layer) readers += t.reads[3] == fwd.writes[1];
  CHECK(readers == 1);
  CHECK(rp.memory.peak_bytes > fused.programs[0].memory.peak_bytes);
}

TEST_CASE("a materialized attention is refused with context parallelism", "[job][attention]") {
  CHECK_THROWS_WITH(parseJob("model: {seq_len: 16}\nparallel: {context_parallel: 2}\n"
                             "schedule: {materialized_attention: true}\n",
                             "bad.yaml"),
                    Catch::Contains("bad.yaml:3: schedule.materialized_attention: a materialized score matrix is not "
                                    "planned with context parallelism"));
}
