// The CPU reference executor as the oracle of the parallelism passes.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/numerics/data.h"

#include "engine/cpu/executor.h"
#include "engine/plan/planner.h"
#include "test_compare.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

using test::relativeDifference;

// Gradients (after any all-reduce) of rank 0, by parameter name.
std::map<std::string, std::vector<float>> gradients(cpu::CpuExecutor& ex) {
  ex.computeGradients();
  std::map<std::string, std::vector<float>> out;
  for (const ParamInfo& p : ex.plan().programs[0].params) out[p.name] = ex.readBuffer(0, p.grad);
  return out;
}

// Adam divides by sqrt(v) + eps. The key bias gradient is structurally zero
// (softmax does not change when every key shifts by the same vector), so its
// fp32 noise (~1e-12) would be amplified into updates of lr * 1e-4 that differ
// between two layouts equal in exact arithmetic. eps = 1e-6 keeps such
// noise-driven updates below the tolerance; the smallest real gradients of
// these jobs are ~1e-5, far above it.
JobSpec forWeightComparison(JobSpec job) {
  job.training.eps = 1e-6;
  return job;
}

std::map<std::string, std::vector<float>> weightsAfterStep(cpu::CpuExecutor& ex, int steps) {
  for (int s = 0; s < steps; ++s) ex.step();
  std::map<std::string, std::vector<float>> out;
  for (const ParamInfo& p : ex.plan().programs[0].params) out[p.name] = ex.readBuffer(0, p.master);
  return out;
}

void requireClose(const std::map<std::string, std::vector<float>>& a,
                  const std::map<std::string, std::vector<float>>& ref, double tol) {
  REQUIRE(a.size() == ref.size());
  for (const auto& [name, values] : ref) {
    const double rel = relativeDifference(a.at(name), values);
    INFO(name << " relative difference " << rel);
    CHECK(rel <= tol);
  }
}

// Every gradient of `got` has the bits of `expected`'s (label: what differs).
void requireBitIdentical(const std::map<std::string, std::vector<float>>& got,
                         const std::map<std::string, std::vector<float>>& expected, const std::string& label) {
  for (const auto& [name, values] : expected) {
    INFO(label << " " << name);
    const auto& g = got.at(name);
    REQUIRE(g.size() == values.size());
    CHECK(std::memcmp(g.data(), values.data(), g.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("Data parallel 2 x b equals data parallel 1 x 2b", "[executor][dp]") {
  cpu::CpuExecutor dp1(buildPlan(test::microJob(4, 1, 1)));
  cpu::CpuExecutor dp2(buildPlan(test::microJob(2, 2, 1)));
  requireClose(gradients(dp2), gradients(dp1), 1e-5);
  cpu::CpuExecutor dp1b(buildPlan(forWeightComparison(test::microJob(4, 1, 1))));
  cpu::CpuExecutor dp2b(buildPlan(forWeightComparison(test::microJob(2, 2, 1))));
  requireClose(weightsAfterStep(dp2b, 2), weightsAfterStep(dp1b, 2), 1e-5);
}

namespace {

// The sharded run against the unsharded one: 3 steps of losses and norms,
// then every parameter on both ranks after gatherParameters(). Sharded
// parameters (ZeRO-3) are read from every rank's shard.
struct ShardCase {
  Precision prec = Precision::FP32;
  int accum = 1;
  bool gather = false;  // comm.gather_embedding_gradient
  bool parameters = false;  // parallel.shard_parameters, else shard_optimizer
  RecomputePolicy recompute = RecomputePolicy::None;
  // Schedule options that change where parameters and gradients are read
  // and written.
  int lm_head_chunks = 1;
  bool fuse_bias_gradients = false;
  bool weight_gradient_stream = true;
  bool reduce_every_micro_batch = false;  // comm.reduce_every_micro_batch (sharded parameters)
  int dp = 2;
  int shard_group_size = 0;  // parallel.shard_group_size: hybrid sharding when below dp
  bool llama = false;  // the Llama family (no position table), embeddings tied
};

void requireShardedMatches(const ShardCase& c) {
  JobSpec whole = forWeightComparison(test::microJob(2, c.dp, c.accum));
  whole.training.precision = c.prec;
  whole.recompute.policy = c.recompute;
  whole.schedule.lm_head_chunks = c.lm_head_chunks;
  whole.schedule.fuse_bias_gradients = c.fuse_bias_gradients;
  whole.schedule.weight_gradient_stream = c.weight_gradient_stream;
  // A vocabulary large enough that gathering the embedding's input
  // gradient (2 x 2 x 8 x 16) beats reduce-scattering wte late.
  whole.model.vocab = 64;
  if (c.llama) {  // 2 query heads of width 8 over 1 key/value head, SwiGLU 40 wide, tied
    whole.model.family = ModelFamily::Llama;
    whole.model.kv_heads = 1;
    whole.model.mlp_ratio = 2.5;
    whole.model.tied_embeddings = true;
  }
  JobSpec sharded = whole;
  (c.parameters ? sharded.parallel.shard_parameters : sharded.parallel.shard_optimizer) = true;
  sharded.comm.gather_embedding_gradient = c.gather;
  sharded.comm.reduce_every_micro_batch = c.reduce_every_micro_batch;
  sharded.parallel.shard_group_size = c.shard_group_size;
  const bool hybrid = c.shard_group_size > 0 && c.shard_group_size < c.dp;
  cpu::CpuExecutor a(buildPlan(whole));
  cpu::CpuExecutor b(buildPlan(sharded));
  const RankPlan& rp = b.plan().programs[0];
  const int buckets = int(rp.buckets.size());
  auto count = [&](auto pred) { return int(std::count_if(rp.tasks.begin(), rp.tasks.end(), pred)); };
  const int scatters_per_bucket = c.reduce_every_micro_batch ? c.accum : 1;
  REQUIRE(count([](const Task& t) { return t.op == OpKind::ReduceScatter; }) == buckets * scatters_per_bucket);
  const int in_place = count([](const Task& t) { return t.op == OpKind::AllGather && t.reads[0] == t.writes[0]; });
  const int forward_copies = count([](const Task& t) {
    return t.op == OpKind::AllGather && t.name.find(".fwd.mb") != std::string::npos;
  });
  const int backward_copies = count([](const Task& t) {
    return t.op == OpKind::AllGather && t.name.find(".bwd.mb") != std::string::npos;
  });
  if (c.parameters) {
    // No parameter bucket stays whole: each is gathered out of place before
    // every micro-batch's forward, and (all but one, whose parameters the
    // backward does not read) again before its backward.
    REQUIRE(in_place == 0);
    REQUIRE(forward_copies == buckets * c.accum);
    REQUIRE(backward_copies >= (buckets - 1) * c.accum);
    REQUIRE(backward_copies <= buckets * c.accum);
    for (const GradBucket& bk : rp.buckets) {
      REQUIRE(bk.param_shard >= 0);
      CHECK(rp.buffers[size_t(bk.param_shard)].persistent);
      CHECK_FALSE(rp.buffers[size_t(bk.param_buffer)].persistent);
    }
  } else {
    REQUIRE(in_place == buckets);
    REQUIRE(forward_copies + backward_copies == 0);
  }
  // The tied embedding's gradient: from a gathered input gradient, or not.
  REQUIRE(count([](const Task& t) { return t.op == OpKind::EmbeddingBwd && t.attrs.shards == 2; }) ==
          (c.gather ? 1 : 0));
  // Hybrid: the sharded collectives in the shard groups, and one all-reduce
  // of each bucket's gradient shard across the replicas.
  REQUIRE(count([](const Task& t) { return t.collective && t.collective->group == "replica"; }) ==
          (hybrid ? buckets : 0));
  if (hybrid)
    for (const Task& t : rp.tasks)
      if (t.op == OpKind::ReduceScatter || t.op == OpKind::AllGather) {
        INFO(t.name);
        CHECK(t.collective->group == "shard");
        CHECK(t.attrs.shards == c.shard_group_size);
      }
  const std::string what = std::string(toString(c.prec)) + " accumulation " + std::to_string(c.accum) +
                           (c.gather ? " gathered" : "") + (c.parameters ? " parameters sharded" : "") +
                           " recompute " + std::string(toString(c.recompute)) + " LM head groups " +
                           std::to_string(c.lm_head_chunks) + (c.fuse_bias_gradients ? " bias gradients fused" : "") +
                           (c.weight_gradient_stream ? "" : " one compute stream") +
                           (c.reduce_every_micro_batch ? " reduced every micro-batch" : "") + " dp " +
                           std::to_string(c.dp) + (hybrid ? " shard groups of " + std::to_string(c.shard_group_size) : "") +
                           (c.llama ? " llama" : "");
  // bf16 and gathered: the embedding's rows are rounded to bf16 once more
  // (the LM head's average, then the embedding's part added), which moves
  // the norm by about 1e-4.
  // Likewise bf16 gradients reduced every micro-batch (each micro-batch's
  // average is rounded, then the sum) and hybrid sharding (the shard
  // group's average, then the replicas').
  const bool rounded_again = (c.gather || c.reduce_every_micro_batch || hybrid) && c.prec == Precision::BF16;
  for (int step = 0; step < 3; ++step) {
    const cpu::StepResult ra = a.step(), rb = b.step();
    INFO(what << " step " << step);
    // (Rounded again, the loss after one update moves by up to 2e-5.)
    CHECK(rb.loss == Approx(ra.loss).epsilon(rounded_again ? 5e-5 : 1e-6));
    CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(rounded_again ? 1e-3 : 1e-5));
  }
  // Every rank holds every updated parameter, as without sharding, once
  // the all-gathers that would begin the next step have run.
  b.gatherParameters();
  a.gatherParameters();  // nothing to gather: must not change anything
  // bf16 rounded once more: the structurally zero key bias's gradient is
  // rounding noise, which Adam turns into lr-sized steps, so that tensor
  // can move 1.1e-2 apart; all parameters together stay within 1e-2.
  const double per_tensor = c.prec == Precision::BF16 ? (rounded_again ? 2e-2 : 1e-2) : 1e-5;
  for (int rank = 0; rank < c.dp; ++rank) {
    std::vector<float> all_got, all_want;
    for (size_t i = 0; i < rp.params.size(); ++i) {
      INFO(what << " rank " << rank << " " << rp.params[i].name);
      const std::vector<float> got = b.parameterValues(rank, int(i));
      const std::vector<float> want = a.readBuffer(rank, a.plan().programs[0].params.at(i).param);
      CHECK(relativeDifference(got, want) <= per_tensor);
      all_got.insert(all_got.end(), got.begin(), got.end());
      all_want.insert(all_want.end(), want.begin(), want.end());
    }
    INFO(what << " rank " << rank << ", all parameters");
    CHECK(relativeDifference(all_got, all_want) <= (c.prec == Precision::BF16 ? 1e-2 : 1e-5));
  }
}

}  // namespace

TEST_CASE("Sharding the optimizer (ZeRO-1) keeps the data-parallel run's losses and weights", "[executor][dp][shard]") {
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (int accum : {1, 2})
      for (bool gather : {false, true}) requireShardedMatches({prec, accum, gather});
}

TEST_CASE("A tied Llama embedding's gradient from the gathered input gradient", "[executor][dp][shard][llama]") {
  // No position table: the gathered backward writes the token rows alone.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (int accum : {1, 2}) {
      ShardCase c{prec, accum, /*gather=*/true};
      c.llama = true;
      requireShardedMatches(c);
    }
}

TEST_CASE("Sharding the parameters (ZeRO-3) keeps the data-parallel run's losses and weights",
          "[executor][dp][shard]") {
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (int accum : {1, 2}) requireShardedMatches({prec, accum, /*gather=*/false, /*parameters=*/true});
  // Recompute reads the parameters in the backward: from the backward's copy.
  for (RecomputePolicy policy : {RecomputePolicy::Selective, RecomputePolicy::Full})
    requireShardedMatches({Precision::FP32, 2, false, true, policy});
  // The LM head in groups (its weight read by every group), bias gradients
  // summed by other tasks, one compute stream.
  requireShardedMatches({Precision::BF16, 2, false, true, RecomputePolicy::Selective, 2, true});
  requireShardedMatches({Precision::FP32, 1, false, true, RecomputePolicy::None, 2, false, false});
  // Gradients reduce-scattered every micro-batch and their shards summed.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    requireShardedMatches({prec, 2, false, true, RecomputePolicy::None, 1, false, true, /*reduce_every=*/true});
  requireShardedMatches({Precision::FP32, 2, false, true, RecomputePolicy::Full, 2, true, true, true});
  // Hybrid sharding: 4 ranks in shard groups of 2, replicated across them.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    requireShardedMatches({prec, 1, false, true, RecomputePolicy::None, 1, false, true, false, 4, 2});
  requireShardedMatches({Precision::FP32, 2, false, true, RecomputePolicy::Selective, 1, false, true, true, 4, 2});
  // One rank: one shard of everything, the sharded schedule all the same.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    requireShardedMatches({prec, 2, false, true, RecomputePolicy::None, 1, false, true, prec == Precision::BF16, 1});
  // A shard group of every rank is plain sharding.
  requireShardedMatches({Precision::FP32, 1, false, true, RecomputePolicy::None, 1, false, true, false, 4, 4});
}

TEST_CASE("Sharding the gradients (ZeRO-2) keeps ZeRO-1's losses and weights", "[executor][dp][shard]") {
  struct Case {
    Precision prec;
    int dp, accum;
    bool reduce_every;  // comm.reduce_every_micro_batch
  };
  for (const Case& c : {Case{Precision::FP32, 2, 1, false}, Case{Precision::FP32, 4, 2, false},
                        Case{Precision::BF16, 2, 2, false}, Case{Precision::BF16, 4, 1, false},
                        Case{Precision::FP32, 2, 2, true}, Case{Precision::BF16, 4, 2, true}}) {
    JobSpec one = forWeightComparison(test::microJob(2, c.dp, c.accum));
    one.training.precision = c.prec;
    one.parallel.shard_optimizer = true;
    JobSpec two = one;
    two.parallel.shard_gradients = true;
    two.comm.reduce_every_micro_batch = c.reduce_every;
    cpu::CpuExecutor a(buildPlan(one));
    cpu::CpuExecutor b(buildPlan(two));
    const std::string what = fmt::format("{} dp {} accumulation {}{}", toString(c.prec), c.dp, c.accum,
                                         c.reduce_every ? " reduced every micro-batch" : "");
    INFO(what);
    // The gradients as shards, the parameters whole (gathered in place
    // after the update, as ZeRO-1's).
    const RankPlan& rp = b.plan().programs[0];
    for (const GradBucket& bk : rp.buckets) {
      REQUIRE(bk.grad_shard >= 0);
      CHECK(bk.param_shard < 0);
      CHECK_FALSE(rp.buffers[size_t(bk.buffer)].persistent);
    }
    int gathers = 0, scatters = 0;
    for (const Task& t : rp.tasks) {
      gathers += t.op == OpKind::AllGather && t.reads[0] == t.writes[0];
      scatters += t.op == OpKind::ReduceScatter;
    }
    CHECK(gathers == int(rp.buckets.size()));
    CHECK(scatters == int(rp.buckets.size()) * (c.reduce_every ? c.accum : 1));
    // Gradients whole only while they are reduced (tests/engine/test_planner.cpp
    // has the saving on a model of some size; this one is all activations).
    if (c.accum == 1) CHECK(rp.memory.arena_bytes <= a.plan().programs[0].memory.arena_bytes);
    // The same reduce-scatter of the same sums, out of place: the same bits,
    // unless each micro-batch's average is rounded to bf16 before the sum.
    const bool rounded_again = c.reduce_every && c.prec == Precision::BF16;
    for (int step = 0; step < 3; ++step) {
      const cpu::StepResult ra = a.step(), rb = b.step();
      INFO("step " << step);
      if (rounded_again) {
        CHECK(rb.loss == Approx(ra.loss).epsilon(5e-5));
        CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(1e-3));
      } else if (c.reduce_every) {
        CHECK(rb.loss == Approx(ra.loss).epsilon(1e-6));
        CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(1e-5));
      } else {
        CHECK(rb.loss == ra.loss);
        CHECK(rb.grad_norm == ra.grad_norm);
      }
    }
    a.gatherParameters();
    b.gatherParameters();
    for (int rank = 0; rank < c.dp; ++rank)
      for (size_t i = 0; i < rp.params.size(); ++i) {
        INFO("rank " << rank << " " << rp.params[i].name);
        const std::vector<float> got = b.parameterValues(rank, int(i));
        const std::vector<float> want = a.parameterValues(rank, int(i));
        if (c.reduce_every)
          CHECK(relativeDifference(got, want) <= (rounded_again ? 2e-2 : 1e-5));
        else
          CHECK(got == want);
      }
  }
}

TEST_CASE("Gradient accumulation 2 x b equals 1 x 2b", "[executor][accumulation]") {
  cpu::CpuExecutor one(buildPlan(test::microJob(4, 1, 1)));
  cpu::CpuExecutor two(buildPlan(test::microJob(2, 1, 2)));
  requireClose(gradients(two), gradients(one), 1e-5);
  cpu::CpuExecutor oneb(buildPlan(forWeightComparison(test::microJob(4, 1, 1))));
  cpu::CpuExecutor twob(buildPlan(forWeightComparison(test::microJob(2, 1, 2))));
  requireClose(weightsAfterStep(twob, 2), weightsAfterStep(oneb, 2), 1e-5);
}

TEST_CASE("Data parallel with accumulation matches the single-rank batch", "[executor][dp]") {
  cpu::CpuExecutor ref(buildPlan(test::microJob(8, 1, 1)));
  cpu::CpuExecutor both(buildPlan(test::microJob(2, 2, 2)));
  requireClose(gradients(both), gradients(ref), 1e-5);
}

TEST_CASE("Every recompute policy gives bit-identical gradients", "[executor][recompute]") {
  for (Precision prec : {Precision::FP32, Precision::BF16}) {
    JobSpec base = test::microJob(2, 1, 2);
    base.training.precision = prec;
    cpu::CpuExecutor ref(buildPlan(base));
    const auto expected = gradients(ref);
    for (RecomputePolicy p : {RecomputePolicy::Selective, RecomputePolicy::Full, RecomputePolicy::Attention,
                              RecomputePolicy::AlternateGemms}) {
      JobSpec job = base;
      job.recompute.policy = p;
      job.recompute.per_layer[1] = p == RecomputePolicy::Full ? RecomputePolicy::Selective : RecomputePolicy::Full;
      cpu::CpuExecutor ex(buildPlan(job));
      requireBitIdentical(gradients(ex), expected, fmt::format("{} {}", toString(prec), toString(p)));
    }
  }
}

TEST_CASE("alternate_gemms on a Llama: the output projection and the cheap ops rerun, gradients bit-identical",
          "[executor][recompute]") {
  for (int tp : {1, 2}) {
    JobSpec base = test::llamaJob(1, 2);
    base.parallel.tensor_parallel = tp;
    base.parallel.sequence_parallel = tp > 1;
    cpu::CpuExecutor ref(buildPlan(base));
    const auto expected = gradients(ref);
    JobSpec job = base;
    job.recompute.policy = RecomputePolicy::AlternateGemms;
    const Plan plan = buildPlan(job);
    // Per layer and micro-batch: the attention's output projection reruns
    // (the residual sum the second norm's backward reads is made from it)
    // unless sequence parallelism's reduce-scatter made what the sum reads;
    // QKV, the MLP's GEMMs and the attention are kept.
    std::map<std::string, int> recomputed;
    for (const Task& t : plan.programs[0].tasks)
      if (t.name.find(".recompute.") != std::string::npos) {
        const std::string what = t.name.substr(t.name.find('.') + 1, t.name.find(".recompute.") - t.name.find('.') - 1);
        ++recomputed[what];
      }
    INFO("tensor_parallel " << tp);
    CHECK(recomputed["attn.proj"] == (tp == 1 ? 2 * 2 : 0));
    CHECK(recomputed["attn.residual"] == 2 * 2);
    CHECK(recomputed.count("attn.qkv") == 0);
    CHECK(recomputed.count("attn.core") == 0);
    CHECK(recomputed.count("mlp.fc") == 0);
    CHECK(recomputed.count("mlp.proj") == 0);
    CHECK(recomputed["ln1"] == 2 * 2);
    CHECK(recomputed["mlp.swiglu"] == 2 * 2);
    // torchtitan keeps a reduce-scatter's output and reruns the rest:
    // under sequence parallelism the norms' all-gathers rerun with them.
    int collectives = 0;
    for (const Task& t : plan.programs[0].tasks)
      if (t.name.find(".recompute.") != std::string::npos && t.kind == TaskKind::Collective) {
        CHECK(t.op == OpKind::AllGather);
        ++collectives;
      }
    CHECK(collectives == (tp == 1 ? 0 : 2 * 2 * 2));
    cpu::CpuExecutor ex(plan);
    requireBitIdentical(gradients(ex), expected, fmt::format("alternate_gemms tp {}", tp));
  }
}

TEST_CASE("Another framework's kernels (flash2, eager) leave the CPU reference's gradients bit-identical",
          "[executor][framework_kernels]") {
  JobSpec base = test::llamaJob(1, 2);
  cpu::CpuExecutor ref(buildPlan(base));
  const auto expected = gradients(ref);
  JobSpec job = base;
  job.schedule.attention_kernel = AttentionKernel::Flash2;
  job.schedule.elementwise = ElementwiseKernels::Eager;
  const Plan plan = buildPlan(job);
  int flash2 = 0, eager = 0;
  for (const Task& t : plan.programs[0].tasks) {
    flash2 += t.attrs.flash2;
    eager += t.attrs.eager;
    // Eager PyTorch fuses no epilogue.
    CHECK(t.fused_into < 0);
    CHECK(t.epilogue == Epilogue::None);
  }
  CHECK(flash2 == 2 * 2 * 2);  // forward and backward of 2 layers in 2 micro-batches
  CHECK(eager > flash2);
  cpu::CpuExecutor ex(plan);
  requireBitIdentical(gradients(ex), expected, "flash2 + eager");
}

TEST_CASE("Separate projections under per-op recompute: the same gradients, the key and up projections rerun",
          "[executor][framework_kernels]") {
  JobSpec base = test::llamaJob(1, 2);
  base.recompute.policy = RecomputePolicy::AlternateGemms;
  cpu::CpuExecutor ref(buildPlan(base));
  const auto expected = gradients(ref);
  JobSpec job = base;
  job.schedule.projections = Projections::Separate;
  const Plan plan = buildPlan(job);
  // torchtitan reruns every second of q, k, v, o, gate, up, down: the key
  // and up projections as GEMMs of their width (the output projection as
  // with fused GEMMs, where the backward needs it).
  const int64_t width = job.model.hidden / job.model.heads;
  int keys = 0, ups = 0;
  for (const Task& t : plan.programs[0].tasks) {
    if (t.name.find(".attn.k.recompute.") != std::string::npos) {
      CHECK(t.op == OpKind::Matmul);
      CHECK(t.attrs.n == job.model.kv_heads * width);
      CHECK(t.attrs.parts.empty());
      ++keys;
    }
    if (t.name.find(".mlp.up.recompute.") != std::string::npos) {
      CHECK(t.attrs.n == int64_t(job.model.hidden * job.model.mlp_ratio));
      ++ups;
    }
  }
  CHECK(keys == 2 * 2);  // 2 layers, 2 micro-batches
  CHECK(ups == 2 * 2);
  cpu::CpuExecutor ex(plan);
  requireBitIdentical(gradients(ex), expected, "separate projections");
  // Fused projections keep the key and up projections' outputs whole.
  for (const Task& t : buildPlan(base).programs[0].tasks)
    CHECK(t.name.find(".attn.k.recompute.") == std::string::npos);
}

TEST_CASE("Bias gradients summed by the neighbouring backward are bit-identical", "[executor][bias_grad]") {
  // engine/passes/bias_grad.h: the layernorm backward sums the residual
  // gradient the weight GEMM read, the attention backward its own output;
  // the same values, so the same sums, with accumulation and across ranks.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (const auto& [dp, accum] : {std::pair{1, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
      JobSpec job = test::microJob(2, dp, accum);
      job.training.precision = prec;
      job.schedule.fuse_bias_gradients = false;
      cpu::CpuExecutor ref(buildPlan(job));
      const auto expected = gradients(ref);
      job.schedule.fuse_bias_gradients = true;
      cpu::CpuExecutor ex(buildPlan(job));
      requireBitIdentical(gradients(ex), expected,
                          fmt::format("{} dp {} accum {}", toString(prec), dp, accum));
    }
}

TEST_CASE("AdamW at the start of the next step: the same losses and weights", "[executor][optimizer]") {
  // schedule.optimizer_beside_forward (pass_buckets.h): each step opens with
  // the previous step's update; finishOptimizer applies the last one. The
  // same arithmetic in the same order, so the same bits.
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (const auto& [dp, accum] : {std::pair{1, 1}, std::pair{1, 2}, std::pair{2, 1}}) {
      JobSpec job = test::microJob(2, dp, accum);
      job.training.precision = prec;
      INFO(toString(prec) << " dp " << dp << " accum " << accum);
      cpu::CpuExecutor ref(buildPlan(job));
      job.schedule.optimizer_beside_forward = true;
      const Plan plan = buildPlan(job);
      REQUIRE(plan.programs[0].tasks.front().op == OpKind::AdamW);
      REQUIRE(plan.programs[0].tasks.front().attrs.from_previous_step);
      cpu::CpuExecutor ex(plan);
      for (int s = 0; s < 3; ++s) {
        const cpu::StepResult a = ref.step(), b = ex.step();
        CHECK(b.loss == a.loss);
        CHECK(b.grad_norm == a.grad_norm);
      }
      // The third step's update is still pending.
      const ParamInfo& p0 = plan.programs[0].params.front();
      CHECK(ex.readBuffer(0, p0.master) != ref.readBuffer(0, p0.master));
      ex.finishOptimizer();
      ex.finishOptimizer();  // nothing left: a second call changes nothing
      for (const ParamInfo& p : plan.programs[0].params) {
        INFO(p.name);
        CHECK(ex.readBuffer(0, p.master) == ref.readBuffer(0, p.master));
        CHECK(ex.readBuffer(0, p.adam_v) == ref.readBuffer(0, p.adam_v));
      }
      // Gradients computed after a step start from the updated parameters.
      JobSpec plain = job;
      plain.schedule.optimizer_beside_forward = false;
      cpu::CpuExecutor ref2(buildPlan(plain));
      ref2.step();
      cpu::CpuExecutor ex2(plan);
      ex2.step();
      CHECK(ex2.computeGradients().loss == ref2.computeGradients().loss);
    }
}

TEST_CASE("The LM head in groups of tokens: the same rows, the weight gradient summed over the groups",
          "[executor][lm_head_chunks]") {
  // engine/passes/lm_head_chunks.h: every row of the logits, losses and the
  // layernorm output's gradient is computed as before, so every gradient
  // but the LM head weight's has the same bits; that one is a sum of one
  // product per group (rounded to bf16 after each in bf16 jobs).
  struct Case {
    Precision prec;
    int dp, accum, chunks;
    bool tied, shard;
  };
  for (const Case& c : {Case{Precision::FP32, 1, 1, 2, true, false}, Case{Precision::FP32, 2, 2, 4, true, false},
                        Case{Precision::FP32, 1, 2, 2, false, false}, Case{Precision::BF16, 1, 1, 2, true, false},
                        Case{Precision::BF16, 2, 1, 2, false, false}, Case{Precision::FP32, 2, 1, 2, true, true},
                        Case{Precision::BF16, 2, 2, 2, true, true}}) {
    JobSpec job = forWeightComparison(test::microJob(4, c.dp, c.accum));  // 32 tokens per micro-batch
    job.training.precision = c.prec;
    job.model.tied_embeddings = c.tied;
    job.model.vocab = 64;  // with a sharded optimizer the embedding's gradient is gathered (pass_embedding_gather.h)
    job.parallel.shard_optimizer = c.shard;
    job.comm.gather_embedding_gradient = c.shard;
    const std::string what = fmt::format("{} dp {} accum {} chunks {}{}{}", toString(c.prec), c.dp, c.accum, c.chunks,
                                         c.tied ? "" : " untied", c.shard ? " sharded" : "");
    INFO(what);
    cpu::CpuExecutor ref(buildPlan(job));
    job.schedule.lm_head_chunks = c.chunks;
    const Plan plan = buildPlan(job);
    REQUIRE(std::count_if(plan.programs[0].tasks.begin(), plan.programs[0].tasks.end(), [](const Task& t) {
              return t.op == OpKind::CrossEntropy;
            }) == c.chunks * c.accum);
    cpu::CpuExecutor ex(plan);
    const std::string lm_head = c.tied ? "wte" : "lm_head.weight";
    auto expected = gradients(ref), got = gradients(ex);
    const double tol = c.prec == Precision::BF16 ? 1e-2 : 1e-6;
    // A different sum of the same products; a wrong accumulate flag (a
    // group overwriting the others') would be off by far more.
    CHECK(relativeDifference(got.at(lm_head), expected.at(lm_head)) <= tol);
    got.erase(lm_head);
    expected.erase(lm_head);
    requireBitIdentical(got, expected, what);
    for (int step = 0; step < 3; ++step) {
      const cpu::StepResult a = ref.step(), b = ex.step();
      INFO("step " << step);
      CHECK(b.loss == Approx(a.loss).epsilon(c.prec == Precision::BF16 ? 1e-4 : 1e-6));
      CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(c.prec == Precision::BF16 ? 1e-2 : 1e-5));
    }
  }
}

TEST_CASE("bf16 jobs store bf16 values and still track the fp32 run", "[executor][bf16]") {
  JobSpec f32 = test::microJob(4, 1, 1);
  JobSpec b16 = f32;
  b16.training.precision = Precision::BF16;
  cpu::CpuExecutor a(buildPlan(f32));
  cpu::CpuExecutor b(buildPlan(b16));
  const double la = a.step().loss, lb = b.step().loss;
  CHECK(std::fabs(la - lb) < 0.02 * std::fabs(la));
  // A bf16 parameter holds only bf16-representable values.
  const ParamInfo& p = b.plan().programs[0].params[2];
  for (float v : b.readBuffer(0, p.param)) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    CHECK((bits & 0xFFFFu) == 0);
  }
}

TEST_CASE("Training lowers the loss on the synthetic process", "[executor][training]") {
  JobSpec job = test::microJob(8, 1, 1);
  job.training.lr = 1e-2;
  job.training.min_lr = 1e-3;
  job.training.warmup_steps = 5;
  job.training.steps = 60;
  job.training.weight_decay = 0;
  cpu::CpuExecutor ex(buildPlan(job));
  double first = 0, last = 0;
  for (int s = 0; s < job.training.steps; ++s) {
    const double loss = ex.step().loss;
    if (s == 0) first = loss;
    last = loss;
  }
  INFO("first " << first << " last " << last);
  CHECK(std::fabs(first - std::log(16.0)) < 0.3);  // starts near uniform
  CHECK(last < first - 0.5);
}

TEST_CASE("Token files feed the executor with the global sample addressing", "[executor][data]") {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("tandem-tokens-" + std::to_string(::getpid()) + ".bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4000; ++i) {
      const uint16_t tok = uint16_t((i * 7 + i / 13) % 16);
      out.put(char(tok & 0xFF));
      out.put(char(tok >> 8));
    }
  }
  JobSpec job = test::microJob(2, 2, 1);
  job.data.source = "tokens";
  job.data.path = path.string();
  auto source = makeTokenSource(job);
  std::vector<int32_t> tokens(job.model.seq_len), targets(job.model.seq_len);
  source->sample(3, tokens.data(), targets.data());
  // Sample 3 starts at token 3 * seq_len; targets are the next tokens.
  for (int j = 0; j < job.model.seq_len; ++j) {
    const int i = 3 * job.model.seq_len + j;
    CHECK(tokens[j] == (i * 7 + i / 13) % 16);
    CHECK(targets[j] == ((i + 1) * 7 + (i + 1) / 13) % 16);
  }
  cpu::CpuExecutor ex(buildPlan(job));
  const double first = ex.step().loss;
  CHECK(std::isfinite(first));

  job.data.path = (fs::temp_directory_path() / "tandem-no-such-token-file.bin").string();
  CHECK_THROWS_AS(makeTokenSource(job), SpecError);
  job.model.vocab = 8;  // tokens up to 15 do not fit
  job.data.path = path.string();
  CHECK_THROWS_WITH(makeTokenSource(job), Catch::Contains("outside the vocabulary"));
  fs::remove(path);
}
