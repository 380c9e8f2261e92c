// The materialized attention (schedule.materialized_attention): the same
// arithmetic as the fused attention with the probabilities kept instead of
// each row's log-sum-exp, so the CPU reference trains it to the same
// gradients; the plan counts the full T x T products and the score
// matrices' passes and memory.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/executor.h"
#include "engine/cpu/kernels.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/plan_json.h"
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

TEST_CASE("dropout on the attention probabilities keeps 1 - p of them, scaled, and the mask it drew",
          "[kernels][attention][dropout]") {
  const int64_t B = 2, T = 48, C = 16, H = 4;
  std::vector<double> qkv(size_t(B * T * 3 * C));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37 * double(i)) * 0.8;
  const size_t scores = size_t(B * H * T * T);
  std::vector<double> out(size_t(B * T * C)), lse(size_t(B * H * T)), probs(scores), dropped(scores);
  std::vector<uint8_t> mask(scores);
  const double p = 0.3;
  cpu::AttentionDropout<double> drop{p, 12345, dropped.data(), mask.data()};
  cpu::attentionForward<double>(out.data(), lse.data(), qkv.data(), B, T, C, H, probs.data(), &drop);
  int64_t causal = 0, kept = 0;
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < T; ++s) {
        const size_t i = size_t((bh * T + t) * T + s);
        if (s > t) {
          CHECK(mask[i] == 0);
          CHECK(dropped[i] == 0);
          continue;
        }
        ++causal;
        kept += mask[i];
        CHECK(dropped[i] == Approx(mask[i] ? probs[i] / (1 - p) : 0.0).margin(1e-15));
      }
  // 4,704 draws: 1 - p kept within five standard deviations (0.033).
  CHECK(double(kept) / double(causal) == Approx(1 - p).margin(0.033));
  // The output is the dropped probabilities' sum of V's rows.
  const int64_t D = C / H;
  for (int64_t t : {0, 17, 47}) {
    const int64_t b = 1, h = 2;
    double want = 0;
    for (int64_t s = 0; s <= t; ++s)
      want += dropped[size_t(((b * H + h) * T + t) * T + s)] * qkv[size_t((b * T + s) * 3 * C + 2 * C + h * D)];
    CHECK(out[size_t((b * T + t) * C + h * D)] == Approx(want).margin(1e-12));
  }
  // Another key draws another mask; the same key the same one.
  std::vector<double> dropped2(scores);
  std::vector<uint8_t> mask2(scores), mask3(scores);
  cpu::AttentionDropout<double> other{p, 12346, dropped2.data(), mask2.data()};
  cpu::attentionForward<double>(out.data(), lse.data(), qkv.data(), B, T, C, H, probs.data(), &other);
  CHECK(mask2 != mask);
  cpu::AttentionDropout<double> again{p, 12345, dropped2.data(), mask3.data()};
  cpu::attentionForward<double>(out.data(), lse.data(), qkv.data(), B, T, C, H, probs.data(), &again);
  CHECK(mask3 == mask);
}

TEST_CASE("attention dropout plans the dropped probabilities and the mask, and trains under recompute",
          "[plan][executor][attention][dropout]") {
  JobSpec job = test::splittableJob(1, 2);
  job.schedule.materialized_attention = true;
  job.training.precision = Precision::BF16;
  const Plan plain = buildPlan(job);
  job.model.attention_dropout = 0.1;
  const Plan dropped = buildPlan(job);
  REQUIRE(gpuRunRefusal(dropped).has_value());
  const RankPlan& rp = dropped.programs[0];
  // Korthikanti et al.'s 5 bytes per score in 16-bit types: the
  // probabilities (2), the dropped ones (2) and the mask (1), kept per
  // layer and micro-batch.
  const Task* fwd = nullptr;
  for (const Task& t : rp.tasks)
    if (t.op == OpKind::Attention) {
      fwd = &t;
      break;
    }
  REQUIRE(fwd);
  REQUIRE(fwd->writes.size() == 4);
  const int64_t scores = fwd->attrs.b * fwd->attrs.h * fwd->attrs.t * fwd->attrs.t;
  CHECK(rp.buffers[size_t(fwd->writes[2])].dtype == DType::BF16);
  CHECK(rp.buffers[size_t(fwd->writes[3])].dtype == DType::U8);
  for (size_t l = 0; l < dropped.recompute.size(); ++l)
    CHECK(dropped.recompute[l].bytes_kept - plain.recompute[l].bytes_kept == 3 * scores);
  CHECK(planFromJson(planToJson(dropped)) == dropped);
  // The dropout's passes: the forward reads P once more and writes the
  // dropped P and the mask.
  const Task* plain_fwd = nullptr;
  for (const Task& t : plain.programs[0].tasks)
    if (t.op == OpKind::Attention) {
      plain_fwd = &t;
      break;
    }
  REQUIRE(plain_fwd);
  CHECK(fwd->bytes_written - plain_fwd->bytes_written == 3 * scores);
  CHECK(fwd->bytes_read - plain_fwd->bytes_read == 2 * scores);

  // Recomputed forwards draw the masks their forwards drew: the same
  // gradients and losses with and without recompute.
  JobSpec kept = job;
  kept.training.precision = Precision::FP32;
  for (RecomputePolicy policy : {RecomputePolicy::Attention, RecomputePolicy::Full}) {
    JobSpec recomputed = kept;
    recomputed.recompute.policy = policy;
    INFO("recompute " << toString(policy));
    cpu::CpuExecutor a(buildPlan(kept));
    cpu::CpuExecutor b(buildPlan(recomputed));
    a.computeGradients();
    b.computeGradients();
    const RankPlan& ap = a.plan().programs[0];
    for (size_t i = 0; i < ap.params.size(); ++i) {
      INFO(ap.params[i].name);
      CHECK(test::relativeDifference(b.readBuffer(0, b.plan().programs[0].params[i].grad),
                                     a.readBuffer(0, ap.params[i].grad)) <= 1e-6);
    }
    for (int step = 0; step < 2; ++step) CHECK(b.step().loss == Approx(a.step().loss).epsilon(1e-6));
  }
  // Dropout changes what is trained: the first step's loss differs.
  JobSpec none = kept;
  none.model.attention_dropout = 0;
  cpu::CpuExecutor with(buildPlan(kept)), without(buildPlan(none));
  CHECK(with.step().loss != without.step().loss);
}

TEST_CASE("attention dropout needs the materialized attention", "[job][attention][dropout]") {
  CHECK_THROWS_WITH(parseJob("model: {attention_dropout: 0.1}\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:1: model.attention_dropout: dropout on the attention probabilities is "
                                    "planned with the materialized attention only"));
  CHECK_THROWS_WITH(parseJob("model: {attention_dropout: 1}\nschedule: {materialized_attention: true}\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:1: model.attention_dropout: ") && Catch::Contains("[0, 1)"));
  const JobSpec job =
      parseJob("model: {attention_dropout: 0.1}\nschedule: {materialized_attention: true}\n", "dropout.yaml");
  CHECK(job.model.attention_dropout == 0.1);
  CHECK(job.yaml.find("attention_dropout: 0.1") != std::string::npos);
  CHECK(parseJob(job.yaml, "again.yaml").model.attention_dropout == 0.1);
}
