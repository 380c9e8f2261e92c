// Tensor parallelism (engine/passes/tensor_parallel.h) against the CPU
// reference executor as the oracle: a job split over a tensor-parallel
// group must train as the same job on one rank per replica.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "engine/cpu/executor.h"
#include "engine/numerics/init.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_compare.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

using test::relativeDifference;
using test::splittableJob;

struct TpCase {
  int tp = 2;
  int dp = 1;
  int accum = 1;
  Precision prec = Precision::FP32;
  RecomputePolicy recompute = RecomputePolicy::None;
  int lm_head_chunks = 1;
  bool fuse_bias_gradients = false;
  bool weight_gradient_stream = true;
  bool optimizer_beside_forward = false;
  // Sharding over each data-parallel group: 1 the optimizer (ZeRO-1), 3
  // the parameters too (ZeRO-3); with hybrid shard groups of this many
  // replicas.
  int sharding = 0;
  int shard_group_size = 0;
  bool sequence_parallel = false;
  bool reduce_every_micro_batch = false;  // with ZeRO-3 and accumulation
  bool llama = false;  // test::llamaJob, as many key/value heads as ranks
  bool squared_relu = false;  // with llama: Nemotron-4's ungated MLP
  bool materialized_attention = false;

  std::string describe() const {
    return "tp " + std::to_string(tp) + " dp " + std::to_string(dp) + " accumulation " + std::to_string(accum) +
           " " + std::string(toString(prec)) + " recompute " + std::string(toString(recompute)) +
           " LM head groups " + std::to_string(lm_head_chunks) + (fuse_bias_gradients ? " bias gradients fused" : "") +
           (weight_gradient_stream ? "" : " one compute stream") +
           (optimizer_beside_forward ? " optimizer beside the forward" : "") +
           (sharding ? " ZeRO-" + std::to_string(sharding) : "") +
           (shard_group_size ? " in shard groups of " + std::to_string(shard_group_size) : "") +
           (reduce_every_micro_batch ? " reduced every micro-batch" : "") +
           (sequence_parallel ? " sequence parallel" : "") + (llama ? " llama" : "") +
           (squared_relu ? " squared relu" : "") + (materialized_attention ? " materialized attention" : "");
  }
};

// Every rank's slice of every parameter (or its gradient, `grad`) against
// the same slice of the reference rank's whole tensor, each within
// `tolerance` and all of a rank's together within `overall`. Parameters
// are read whole from their shards where sharded.
void requireSlicesMatch(const cpu::CpuExecutor& split, const cpu::CpuExecutor& whole, int dp, bool grad,
                        double tolerance, double overall, const std::string& what) {
  const Plan& sp = split.plan();
  const RankPlan& srp = sp.programs[0];
  const RankPlan& wrp = whole.plan().programs[0];
  REQUIRE(srp.params.size() == wrp.params.size());
  const int tp = sp.job.parallel.tensor_parallel;
  std::vector<std::vector<float>> all_got(size_t(dp * tp)), all_want(size_t(dp * tp));
  for (int replica = 0; replica < dp; ++replica)
    for (size_t i = 0; i < srp.params.size(); ++i) {
      const ParamInfo& sparam = srp.params[i];
      const ParamInfo& wparam = wrp.params[i];
      REQUIRE(sparam.name == wparam.name);
      const std::vector<float> ref =
          grad ? whole.readBuffer(replica, wparam.grad) : whole.parameterValues(replica, int(i));
      for (int place = 0; place < tp; ++place) {
        const int rank = replica * tp + place;
        const std::vector<float> got = grad ? split.readBuffer(rank, sparam.grad) : split.parameterValues(rank, int(i));
        const std::vector<float> want = tensorParallelSlice(sp.job, srp, sparam, rank, ref);
        INFO(what << (grad ? " gradient of " : " ") << sparam.name << " on rank " << rank);
        CHECK(relativeDifference(got, want) <= tolerance);
        all_got[size_t(rank)].insert(all_got[size_t(rank)].end(), got.begin(), got.end());
        all_want[size_t(rank)].insert(all_want[size_t(rank)].end(), want.begin(), want.end());
      }
    }
  for (size_t rank = 0; rank < all_got.size(); ++rank) {
    INFO(what << (grad ? " gradients" : " parameters") << " of rank " << rank << ", all together");
    CHECK(relativeDifference(all_got[rank], all_want[rank]) <= overall);
  }
}

void requireTensorParallelMatches(const TpCase& c) {
  JobSpec whole = c.llama ? test::llamaJob(c.dp, c.accum, 2, c.tp) : splittableJob(c.dp, c.accum);
  if (c.squared_relu) whole.model.mlp_activation = MlpActivation::SquaredRelu;
  whole.schedule.materialized_attention = c.materialized_attention;
  whole.training.precision = c.prec;
  whole.recompute.policy = c.recompute;
  whole.schedule.lm_head_chunks = c.lm_head_chunks;
  whole.schedule.fuse_bias_gradients = c.fuse_bias_gradients;
  whole.schedule.weight_gradient_stream = c.weight_gradient_stream;
  whole.schedule.optimizer_beside_forward = c.optimizer_beside_forward;
  JobSpec split = whole;
  split.parallel.tensor_parallel = c.tp;
  split.parallel.shard_optimizer = c.sharding == 1;
  split.parallel.shard_parameters = c.sharding == 3;
  split.parallel.shard_group_size = c.shard_group_size;
  split.parallel.sequence_parallel = c.sequence_parallel;
  split.comm.reduce_every_micro_batch = c.reduce_every_micro_batch;
  cpu::CpuExecutor a(buildPlan(whole));
  cpu::CpuExecutor b(buildPlan(split));
  const std::string what = c.describe();
  INFO(what);
  REQUIRE(b.plan().world_size == c.dp * c.tp);
  // bf16: the partial products are rounded before their sum, and the
  // slices' gradients after it: the same run to bf16 accuracy.
  const bool bf16 = c.prec == Precision::BF16;
  // Sharded, a bucket's gradient is whole nowhere after the step's collectives.
  if (c.sharding == 0) {
    a.computeGradients();
    b.computeGradients();
    requireSlicesMatch(b, a, c.dp, /*grad=*/true, bf16 ? 2e-2 : 1e-5, bf16 ? 1e-2 : 1e-5, what);
  }
  for (int step = 0; step < 3; ++step) {
    const cpu::StepResult ra = a.step(), rb = b.step();
    INFO("step " << step);
    CHECK(rb.loss == Approx(ra.loss).epsilon(bf16 ? 2e-3 : 1e-6));
    CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(bf16 ? 2e-2 : 1e-5));
  }
  a.finishOptimizer();
  b.finishOptimizer();
  b.gatherParameters();  // ZeRO-1: the next step would begin with these
  // bf16: the biases start at zero, and Adam's first steps move each
  // element by about the learning rate whatever its gradient's size, so
  // a bias's elements with the smallest gradients (the key bias's are
  // rounding noise) differ by up to 6% after 3 steps (the fp32 cases
  // bound the arithmetic at 1e-5); all parameters together stay within 1e-2.
  requireSlicesMatch(b, a, c.dp, /*grad=*/false, bf16 ? 8e-2 : 1e-5, bf16 ? 1e-2 : 1e-5, what);
}

int countTasks(const RankPlan& rp, const std::function<bool(const Task&)>& pred) {
  return int(std::count_if(rp.tasks.begin(), rp.tasks.end(), pred));
}

}  // namespace

TEST_CASE("Tensor parallel groups train as one rank per replica", "[executor][tp]") {
  for (int tp : {2, 4}) requireTensorParallelMatches({tp});
  // With data parallelism: groups of 2 in 2 replicas against 2 ranks.
  requireTensorParallelMatches({2, 2});
  requireTensorParallelMatches({2, 2, 2});
  // Recompute re-runs the row-parallel layers' all-reduces (full) or none (selective).
  for (RecomputePolicy policy : {RecomputePolicy::Selective, RecomputePolicy::Full})
    requireTensorParallelMatches({2, 1, 2, Precision::FP32, policy});
  requireTensorParallelMatches({2, 2, 1, Precision::BF16});
  requireTensorParallelMatches({4, 1, 2, Precision::BF16, RecomputePolicy::Full});
  // Schedule options that move bias gradients and the optimizer (the LM
  // head in groups is refused with the vocabulary split).
  requireTensorParallelMatches({2, 1, 1, Precision::FP32, RecomputePolicy::None, 1, true});
  requireTensorParallelMatches({2, 2, 1, Precision::FP32, RecomputePolicy::Selective, 1, false, false});
  requireTensorParallelMatches({2, 1, 2, Precision::FP32, RecomputePolicy::None, 1, false, true, true});
}

TEST_CASE("Tensor parallel groups with a sharded optimizer or sharded parameters", "[executor][tp][shard]") {
  TpCase zero1{2, 2};
  zero1.sharding = 1;
  requireTensorParallelMatches(zero1);
  zero1.accum = 2;
  requireTensorParallelMatches(zero1);
  TpCase zero1_bf16{2, 2, 2, Precision::BF16};
  zero1_bf16.sharding = 1;
  requireTensorParallelMatches(zero1_bf16);
  TpCase zero3{2, 2, 2, Precision::FP32, RecomputePolicy::Full};
  zero3.sharding = 3;
  requireTensorParallelMatches(zero3);
  zero3.recompute = RecomputePolicy::None;
  zero3.tp = 4;
  zero3.accum = 1;
  requireTensorParallelMatches(zero3);
  // Hybrid: 4 replicas in shard groups of 2, each replica 2 ranks.
  TpCase hybrid{2, 4};
  hybrid.sharding = 3;
  hybrid.shard_group_size = 2;
  requireTensorParallelMatches(hybrid);
  // One replica: one shard of everything.
  TpCase one{2, 1, 2, Precision::BF16};
  one.sharding = 3;
  requireTensorParallelMatches(one);
}

TEST_CASE("Sequence parallel groups train as one rank per replica", "[executor][tp][sp]") {
  // Each case as its tensor-parallel twin above, with the residual stream
  // and the LayerNorms on the rank's tokens.
  auto sp = [](TpCase c) {
    c.sequence_parallel = true;
    return c;
  };
  for (int tp : {2, 4}) requireTensorParallelMatches(sp({tp}));
  requireTensorParallelMatches(sp({2, 2, 2}));
  // Selective recompute gathers the LayerNorms' outputs again; full
  // recompute re-runs the block from its input, the rank's tokens.
  for (RecomputePolicy policy : {RecomputePolicy::Selective, RecomputePolicy::Full})
    requireTensorParallelMatches(sp({2, 1, 2, Precision::FP32, policy}));
  requireTensorParallelMatches(sp({2, 2, 1, Precision::BF16}));
  requireTensorParallelMatches(sp({4, 1, 2, Precision::BF16, RecomputePolicy::Full}));
  // Bias gradients summed by the LayerNorm backward (over the rank's tokens
  // alone, then over the group), one compute stream, the optimizer beside
  // the forward.
  requireTensorParallelMatches(sp({2, 1, 2, Precision::FP32, RecomputePolicy::None, 1, true}));
  requireTensorParallelMatches(sp({2, 2, 1, Precision::FP32, RecomputePolicy::Selective, 1, false, false}));
  requireTensorParallelMatches(sp({2, 1, 2, Precision::FP32, RecomputePolicy::None, 1, false, true, true}));
}

TEST_CASE("Tensor parallel Llama groups train as one rank per replica", "[executor][tp][llama]") {
  // Whole key/value groups per rank, the gate's and the up half's rows.
  auto llama = [](TpCase c) {
    c.llama = true;
    return c;
  };
  for (int tp : {2, 4}) requireTensorParallelMatches(llama({tp}));
  requireTensorParallelMatches(llama({2, 2, 2, Precision::FP32, RecomputePolicy::Selective}));
  TpCase sp = llama({2, 1, 2, Precision::FP32, RecomputePolicy::Full});
  sp.sequence_parallel = true;
  requireTensorParallelMatches(sp);
  TpCase zero3 = llama({2, 2, 2, Precision::BF16});
  zero3.sharding = 3;
  requireTensorParallelMatches(zero3);
  // Nemotron-4's ungated MLP: each rank's rows of the input layer.
  TpCase relu2 = llama({2, 2, 2, Precision::FP32, RecomputePolicy::Attention});
  relu2.squared_relu = true;
  relu2.sequence_parallel = true;
  requireTensorParallelMatches(relu2);
  relu2.materialized_attention = true;
  requireTensorParallelMatches(relu2);
}

TEST_CASE("Sequence parallel groups with sharding", "[executor][tp][sp][shard]") {
  TpCase zero1{2, 2, 2};
  zero1.sharding = 1;
  zero1.sequence_parallel = true;
  requireTensorParallelMatches(zero1);
  TpCase zero3{2, 2, 2, Precision::FP32, RecomputePolicy::Full};
  zero3.sharding = 3;
  zero3.sequence_parallel = true;
  requireTensorParallelMatches(zero3);
  // Gradients restarted every micro-batch: the LayerNorms' sums after each.
  zero3.recompute = RecomputePolicy::None;
  zero3.fuse_bias_gradients = true;
  zero3.reduce_every_micro_batch = true;
  requireTensorParallelMatches(zero3);
  TpCase hybrid{2, 4};
  hybrid.sharding = 3;
  hybrid.shard_group_size = 2;
  hybrid.sequence_parallel = true;
  requireTensorParallelMatches(hybrid);
}

TEST_CASE("Tensor parallel plans split the blocks and add the group's collectives", "[planner][tp]") {
  JobSpec job = splittableJob(2, 2);
  job.parallel.tensor_parallel = 2;
  job.recompute.policy = RecomputePolicy::Full;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  REQUIRE(plan.world_size == 4);
  REQUIRE(rp.ranks == std::vector<int>{0, 1, 2, 3});
  // Groups: data parallel across replicas at each place, tensor parallel within a replica.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const ProcessGroup& g : plan.groups) groups.emplace_back(g.name, g.ranks);
  CHECK(groups == std::vector<std::pair<std::string, std::vector<int>>>{
                      {"dp", {0, 2}}, {"dp", {1, 3}}, {"tp", {0, 1}}, {"tp", {2, 3}}});
  // Hybrid sharding splits each data-parallel group: 8 ranks = 4 replicas
  // of 2, sharded within pairs of replicas.
  {
    JobSpec hybrid = splittableJob(4, 1);
    hybrid.parallel.tensor_parallel = 2;
    hybrid.parallel.shard_parameters = true;
    hybrid.parallel.shard_group_size = 2;
    std::vector<std::pair<std::string, std::vector<int>>> got;
    for (const ProcessGroup& g : buildPlan(hybrid).groups) got.emplace_back(g.name, g.ranks);
    CHECK(got == std::vector<std::pair<std::string, std::vector<int>>>{
                     {"dp", {0, 2, 4, 6}}, {"dp", {1, 3, 5, 7}}, {"tp", {0, 1}}, {"tp", {2, 3}}, {"tp", {4, 5}},
                     {"tp", {6, 7}}, {"shard", {0, 2}}, {"shard", {1, 3}}, {"shard", {4, 6}}, {"shard", {5, 7}},
                     {"replica", {0, 4}}, {"replica", {1, 5}}, {"replica", {2, 6}}, {"replica", {3, 7}}});
  }

  const int layers = job.model.layers, accum = job.training.grad_accum;
  auto onGroup = [&](const std::string& group, Phase phase) {
    return countTasks(rp, [&](const Task& t) {
      return t.collective && t.collective->group == group && t.phase == phase;
    });
  };
  // Per micro-batch in the forward: two row-parallel sums per block, the
  // embedding's sum and the loss statistics' gather (the vocabulary is
  // split); both block sums again in the full recompute (the block's
  // forward runs again whole, as Megatron-LM's checkpoint runs it); in
  // the backward two input-gradient sums per block and the LM head's; one
  // for the norm.
  CHECK(onGroup("tp", Phase::Forward) == (2 * layers + 2) * accum);
  CHECK(onGroup("tp", Phase::Recompute) == 2 * layers * accum);
  CHECK(onGroup("tp", Phase::Backward) == (2 * layers + 1) * accum);
  CHECK(onGroup("tp", Phase::Optimizer) == 1);
  for (const Task& t : rp.tasks)
    if (t.collective && t.collective->group == "tp") {
      INFO(t.name);
      CHECK(t.stream == 0);  // the next task needs the sum
      CHECK(t.collective->reduce == ReduceOp::Sum);
    }

  // Parameters: sliced where the blocks split, whole elsewhere; the model
  // is counted whole.
  const JobSpec one_rank_job = splittableJob(2, 2);
  const Plan reference = buildPlan(one_rank_job);
  CHECK(plan.summary.parameters == reference.summary.parameters);
  CHECK(plan.summary.model_flops_per_token == reference.summary.model_flops_per_token);
  for (size_t i = 0; i < rp.params.size(); ++i) {
    const ParamInfo& p = rp.params[i];
    const ParamInfo& r = reference.programs[0].params[i];
    const int64_t got = rp.buffers[size_t(p.param)].elementCount();
    const int64_t whole = reference.programs[0].buffers[size_t(r.param)].elementCount();
    INFO(p.name);
    // The blocks' four linear layers, and the embedding (with the LM head)
    // by vocabulary rows.
    const bool sliced = p.name.find("qkv") != std::string::npos || p.name.find("mlp.fc") != std::string::npos ||
                        p.name.find("proj.weight") != std::string::npos || p.name == "wte";
    CHECK((p.split_dim >= 0) == sliced);
    CHECK(got == (sliced ? whole / 2 : whole));
    if (p.name.find("qkv") != std::string::npos) CHECK(p.split_blocks == 3);
  }
  // Less memory per rank than the replica on one rank.
  CHECK(rp.memory.arena_bytes < reference.programs[0].memory.arena_bytes);
  // The plan survives its JSON form.
  CHECK(planFromJson(planToJson(plan)) == plan);
}

TEST_CASE("Tensor-parallel slices of the initial parameters make up the whole parameters", "[executor][tp]") {
  JobSpec job = splittableJob(1, 1);
  const Plan whole_plan = buildPlan(job);
  job.parallel.tensor_parallel = 4;
  const Plan split_plan = buildPlan(job);
  const RankPlan& wrp = whole_plan.programs[0];
  const RankPlan& srp = split_plan.programs[0];
  for (size_t i = 0; i < srp.params.size(); ++i) {
    const std::vector<float> whole = initialParameterValues(whole_plan.job, wrp, wrp.params[i], 0);
    std::vector<float> seen(whole.size(), 0.0f);
    int64_t total = 0;
    for (int rank = 0; rank < 4; ++rank) {
      const std::vector<float> mine = initialParameterValues(split_plan.job, srp, srp.params[i], rank);
      INFO(srp.params[i].name << " rank " << rank);
      REQUIRE(int64_t(mine.size()) == srp.buffers[size_t(srp.params[i].param)].elementCount());
      CHECK(mine == tensorParallelSlice(split_plan.job, srp, srp.params[i], rank, whole));
      total += int64_t(mine.size());
    }
    // Slices of a split parameter are disjoint and cover it.
    INFO(srp.params[i].name);
    CHECK(total == int64_t(whole.size()) * (srp.params[i].split_dim >= 0 ? 1 : 4));
  }
  // The QKV weight's rank-1 slice: rows 4..7 of each of the query, key and
  // value blocks of 16 rows (hidden 16, 4 ranks), 16 columns each.
  const ParamInfo& qkv = srp.params[4];
  REQUIRE(qkv.name == "layer0.attn.qkv.weight");
  const std::vector<float> whole = initialParameterValues(whole_plan.job, wrp, wrp.params[4], 0);
  const std::vector<float> mine = initialParameterValues(split_plan.job, srp, qkv, 1);
  for (int block = 0; block < 3; ++block)
    for (int row = 0; row < 4; ++row)
      for (int col = 0; col < 16; ++col) {
        INFO("block " << block << " row " << row << " column " << col);
        REQUIRE(mine[size_t((block * 4 + row) * 16 + col)] == whole[size_t((block * 16 + 4 + row) * 16 + col)]);
      }
}

TEST_CASE("Sequence parallel plans: the residual stream on the rank's tokens", "[planner][tp][sp]") {
  JobSpec tp_job = splittableJob(1, 2);
  tp_job.parallel.tensor_parallel = 2;
  JobSpec job = tp_job;
  job.parallel.sequence_parallel = true;
  job.schedule.fuse_bias_gradients = true;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  const int layers = job.model.layers, accum = job.training.grad_accum, tp = 2;
  auto count = [&](Phase phase, CollectiveOp op) {
    return countTasks(rp, [&](const Task& t) {
      return t.collective && t.collective->group == "tp" && t.phase == phase && t.collective->op == op;
    });
  };
  // Per micro-batch in the forward: an all-gather after each of a block's
  // two LayerNorms and the final one, a reduce-scatter after each
  // row-parallel layer and the embedding, the loss statistics' gather; in
  // the backward each one's transpose (the loss statistics have none).
  CHECK(count(Phase::Forward, CollectiveOp::AllGather) == (2 * layers + 2) * accum);
  CHECK(count(Phase::Forward, CollectiveOp::ReduceScatter) == (2 * layers + 1) * accum);
  CHECK(count(Phase::Forward, CollectiveOp::AllReduce) == 0);
  CHECK(count(Phase::Backward, CollectiveOp::ReduceScatter) == (2 * layers + 1) * accum);
  CHECK(count(Phase::Backward, CollectiveOp::AllGather) == (2 * layers + 1) * accum);
  CHECK(count(Phase::Backward, CollectiveOp::AllReduce) == 0);
  // The LayerNorms' weights and biases summed once per step, on the
  // communication stream (the output projections' bias gradients stay on
  // their weight GEMMs even with fusion asked for: their output gradient
  // is an all-gather's, of every token, not the residual gradient a
  // LayerNorm backward adds to); the norm's sum.
  CHECK(count(Phase::Comm, CollectiveOp::AllReduce) == 4 * layers + 2);
  CHECK(countTasks(rp, [](const Task& t) { return t.op == OpKind::LayerNormBwd && t.attrs.bias_grad; }) == 0);
  CHECK(countTasks(rp, [](const Task& t) { return t.op == OpKind::AttentionBwd && t.attrs.bias_grad; }) ==
        layers * accum);
  CHECK(count(Phase::Optimizer, CollectiveOp::AllReduce) == 1);
  for (const Task& t : rp.tasks)
    if (t.collective && t.collective->group == "tp") {
      INFO(t.name);
      CHECK((t.stream == 0) == (t.phase != Phase::Comm));
    }

  // Per layer and micro-batch the backward keeps the block's input and its
  // residual sum (and both LayerNorms' statistics) for the rank's tokens
  // alone.
  const Plan tp_plan = buildPlan(tp_job);
  const int64_t M = int64_t(job.training.micro_batch) * job.model.seq_len, C = job.model.hidden;
  const int64_t saved = (2 * M * C * 4 + 4 * M * 4) * (tp - 1) / tp;  // fp32
  for (int l = 0; l < layers; ++l) {
    INFO("layer " << l);
    CHECK(tp_plan.recompute[size_t(l)].bytes_kept - plan.recompute[size_t(l)].bytes_kept == saved);
  }
  CHECK(rp.memory.activation_peak_bytes < tp_plan.programs[0].memory.activation_peak_bytes);
  CHECK(planFromJson(planToJson(plan)) == plan);

  // Selective recompute gathers the LayerNorms' outputs again instead of
  // keeping them: two all-gathers per block and micro-batch.
  job.recompute.policy = RecomputePolicy::Selective;
  const Plan selective = buildPlan(job);
  CHECK(countTasks(selective.programs[0], [](const Task& t) {
          return t.phase == Phase::Recompute && t.collective && t.collective->op == CollectiveOp::AllGather;
        }) == 2 * layers * accum);
  CHECK(countTasks(selective.programs[0], [](const Task& t) {
          return t.phase == Phase::Recompute && t.op == OpKind::LayerNorm;
        }) == 0);
}
