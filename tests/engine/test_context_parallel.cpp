// Context parallelism (ParallelSpec::context_parallel) against the CPU
// reference executor as the oracle: a job whose sequences are split over
// context-parallel ranks must train as the same job without the split,
// gradient by gradient (fp32: each tensor within 1e-5), step after step.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/cpu/executor.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_compare.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

using test::relativeDifference;

struct CpCase {
  int cp = 2;
  bool llama = false;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int accum = 1;
  Precision prec = Precision::FP32;
  RecomputePolicy recompute = RecomputePolicy::None;
  bool sequence_parallel = false;
  int sharding = 0;  // 1: ZeRO-1, 3: ZeRO-3

  std::string describe() const {
    return "cp " + std::to_string(cp) + (llama ? " llama" : " gpt-2") + " dp " + std::to_string(dp) + " tp " +
           std::to_string(tp) + " pp " + std::to_string(pp) + " accumulation " + std::to_string(accum) + " " +
           std::string(toString(prec)) + " recompute " + std::string(toString(recompute)) +
           (sequence_parallel ? " sequence parallel" : "") + (sharding ? " ZeRO-" + std::to_string(sharding) : "");
  }
};

JobSpec referenceJob(const CpCase& c) {
  JobSpec j = c.llama ? test::llamaJob(c.dp, c.accum, 2, 2) : test::splittableJob(c.dp, c.accum);
  j.model.seq_len = 16;  // 2 x cp chunks of 2 tokens or more
  j.training.precision = c.prec;
  j.recompute.policy = c.recompute;
  j.parallel.tensor_parallel = c.tp;
  j.parallel.sequence_parallel = c.sequence_parallel;
  j.parallel.pipeline_parallel = c.pp;
  j.parallel.shard_optimizer = c.sharding == 1;
  j.parallel.shard_parameters = c.sharding == 3;
  if (c.pp > 1 && c.accum < c.pp) j.training.grad_accum = c.pp;
  return j;
}

// The rank of the reference job that holds what `rank` of the split job
// holds: the same stage and tensor-parallel place of its sample replica.
int referenceRank(const JobSpec& split, const JobSpec& whole, int rank) {
  return whole.rankAt(split.pipelineStage(rank), split.sampleReplica(rank), split.tensorParallelPlace(rank));
}

void requireContextParallelMatches(const CpCase& c) {
  const JobSpec whole = referenceJob(c);
  JobSpec split = whole;
  split.parallel.context_parallel = c.cp;
  cpu::CpuExecutor a(buildPlan(whole));
  cpu::CpuExecutor b(buildPlan(split));
  INFO(c.describe());
  REQUIRE(b.plan().world_size == whole.worldSize() * c.cp);
  const bool bf16 = c.prec == Precision::BF16;
  const double tolerance = bf16 ? 2e-2 : 1e-5;
  if (c.sharding == 0) {  // sharded, no rank holds a whole gradient after the step's collectives
    a.computeGradients();
    b.computeGradients();
    for (int rank = 0; rank < b.plan().world_size; ++rank) {
      const int ref = referenceRank(split, whole, rank);
      const RankPlan& sp = b.plan().programs[size_t(split.pipelineStage(rank))];
      const RankPlan& wp = a.plan().programs[size_t(whole.pipelineStage(ref))];
      REQUIRE(sp.params.size() == wp.params.size());
      for (size_t i = 0; i < sp.params.size(); ++i) {
        INFO("gradient of " << sp.params[i].name << " on rank " << rank << " (reference rank " << ref << ")");
        CHECK(relativeDifference(b.readBuffer(rank, sp.params[i].grad), a.readBuffer(ref, wp.params[i].grad)) <=
              tolerance);
      }
    }
  }
  for (int step = 0; step < 3; ++step) {
    const cpu::StepResult ra = a.step(), rb = b.step();
    INFO("step " << step);
    CHECK(rb.loss == Approx(ra.loss).epsilon(bf16 ? 2e-3 : 1e-6));
    CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(bf16 ? 2e-2 : 1e-5));
  }
  a.finishOptimizer();
  b.finishOptimizer();
  a.gatherParameters();
  b.gatherParameters();
  // bf16: as in test_tensor_parallel.cpp, Adam's first steps move every
  // element of a bias by about the learning rate whatever its gradient, so
  // the key bias (whose gradient is rounding noise) differs by a few
  // percent after 3 steps; all parameters together stay within 1e-2.
  for (int rank = 0; rank < b.plan().world_size; ++rank) {
    const int ref = referenceRank(split, whole, rank);
    const RankPlan& sp = b.plan().programs[size_t(split.pipelineStage(rank))];
    std::vector<float> all_got, all_want;
    for (size_t i = 0; i < sp.params.size(); ++i) {
      const std::vector<float> got = b.parameterValues(rank, int(i)), want = a.parameterValues(ref, int(i));
      INFO(sp.params[i].name << " after 3 steps on rank " << rank << " (reference rank " << ref << ")");
      CHECK(relativeDifference(got, want) <= (bf16 ? 8e-2 : 1e-5));
      all_got.insert(all_got.end(), got.begin(), got.end());
      all_want.insert(all_want.end(), want.begin(), want.end());
    }
    INFO("every parameter after 3 steps on rank " << rank);
    CHECK(relativeDifference(all_got, all_want) <= (bf16 ? 1e-2 : 1e-5));
  }
}

}  // namespace

TEST_CASE("Context parallel ranks train as one rank per sequence", "[executor][cp]") {
  for (int cp : {2, 4}) {
    requireContextParallelMatches({cp});
    requireContextParallelMatches({cp, /*llama=*/true});
  }
  CpCase dp{2};
  dp.dp = 2;
  dp.accum = 2;
  requireContextParallelMatches(dp);
  // Recompute re-runs the key/value gather (full) or leaves it kept (selective).
  for (RecomputePolicy policy : {RecomputePolicy::Selective, RecomputePolicy::Full}) {
    CpCase rc{2, true};
    rc.recompute = policy;
    requireContextParallelMatches(rc);
  }
  CpCase bf16{2};
  bf16.prec = Precision::BF16;
  requireContextParallelMatches(bf16);
}

TEST_CASE("Context parallelism combines with tensor, sequence and pipeline parallelism and sharding",
          "[executor][cp]") {
  for (bool llama : {false, true}) {
    CpCase tp{2, llama};
    tp.tp = 2;
    requireContextParallelMatches(tp);
    tp.sequence_parallel = true;
    requireContextParallelMatches(tp);
  }
  CpCase pp{2};
  pp.pp = 2;
  requireContextParallelMatches(pp);
  CpCase zero1{2};
  zero1.dp = 2;
  zero1.sharding = 1;
  requireContextParallelMatches(zero1);
  CpCase zero3{2, true};
  zero3.sharding = 3;
  zero3.accum = 2;
  requireContextParallelMatches(zero3);
}

TEST_CASE("Context parallel plans gather keys and values over their own groups", "[plan][cp]") {
  JobSpec job = test::llamaJob(2, 1, 2, 2);
  job.model.seq_len = 16;
  job.parallel.context_parallel = 2;
  job.parallel.tensor_parallel = 2;
  const Plan plan = buildPlan(job);
  REQUIRE(plan.world_size == 8);
  // Megatron's order: tensor-parallel place fastest, then the context-parallel place.
  std::vector<std::vector<int>> cp_groups;
  for (const ProcessGroup& g : plan.groups)
    if (g.name == "cp") cp_groups.push_back(g.ranks);
  CHECK(cp_groups == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  for (const ProcessGroup& g : plan.groups)
    if (g.name == "dp") CHECK(g.ranks.size() == 4);  // every replica averages gradients
  int gathers = 0, scatters = 0;
  for (const Task& t : plan.programs[0].tasks) {
    if (!t.collective || t.collective->group != "cp") continue;
    gathers += t.op == OpKind::AllGather;
    scatters += t.op == OpKind::ReduceScatter;
    // The keys and values of one key/value head per rank (2 heads over tp 2), 8 tokens each.
    CHECK(t.collective->count == 2 * 2 * 8 * (2 * 1 * 4));
  }
  CHECK(gathers == job.model.layers);
  CHECK(scatters == job.model.layers);
  // The attention's work is the rank's share of the whole sequence's.
  JobSpec one = job;
  one.parallel.context_parallel = 1;
  const Plan whole = buildPlan(one);
  auto attentionFlops = [](const Plan& p) {
    double f = 0;
    for (const Task& t : p.programs[0].tasks)
      if (t.op == OpKind::Attention) f += t.flops;
    return f;
  };
  CHECK(attentionFlops(plan) == Approx(attentionFlops(whole) / 2));
}
