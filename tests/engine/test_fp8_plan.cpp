// FP8 GEMMs (training.precision fp8, engine/passes/fp8_gemms.h): which
// GEMMs read FP8 operands, where the casts go, and that no GEMM reads a
// copy its source was written after.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "engine/cpu/executor.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/numerics/fp8_history.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

bool isGemm(OpKind op) { return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight; }

JobSpec fp8Job(bool llama, RecomputePolicy recompute = RecomputePolicy::None) {
  JobSpec j = llama ? test::llamaJob(1, 2) : test::splittableJob(1, 2);
  j.training.precision = Precision::FP8;
  j.recompute.policy = recompute;
  return j;
}

// Every FP8 operand a GEMM reads was cast (or written) after the last
// write of what it copies, before the GEMM.
void requireFreshCopies(const RankPlan& rp) {
  std::map<int, size_t> last_write;  // buffer -> task index of its latest writer so far
  std::map<int, std::pair<int, size_t>> cast_of;  // FP8 copy -> (source, task index of the cast)
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    if (t.op == OpKind::CastFp8)
      for (int w : t.writes) cast_of[w] = {t.reads[0], i};
    if (isGemm(t.op) && t.attrs.fp8)
      for (int slot : {0, 1}) {
        const int b = t.reads[size_t(slot)];
        INFO(t.name << " operand " << slot << " " << rp.buffers[size_t(b)].name);
        CHECK(rp.buffers[size_t(b)].dtype == DType::F8);
        if (auto c = cast_of.find(b); c != cast_of.end()) {
          const auto [source, at] = c->second;
          CHECK((!last_write.count(source) || last_write.at(source) < at));
        }
      }
    for (int b : t.writes) last_write[b] = i;
  }
}

}  // namespace

TEST_CASE("FP8 plans: the blocks' GEMMs read FP8 copies, the embedding and the LM head stay bf16", "[plan][fp8]") {
  for (bool llama : {false, true})
    for (RecomputePolicy recompute : {RecomputePolicy::None, RecomputePolicy::Selective, RecomputePolicy::Full}) {
      const JobSpec job = fp8Job(llama, recompute);
      INFO((llama ? "llama" : "gpt-2") << " recompute " << toString(recompute));
      const Plan plan = buildPlan(job);
      const RankPlan& rp = plan.programs[0];
      int fp8 = 0, bf16 = 0, casts = 0;
      std::map<std::string, int> weight_casts;
      for (const Task& t : rp.tasks) {
        if (isGemm(t.op)) {
          INFO(t.name);
          CHECK(t.attrs.fp8 == (t.layer >= 0));
          (t.attrs.fp8 ? fp8 : bf16) += 1;
        }
        if (t.op == OpKind::CastFp8) {
          ++casts;
          const Buffer& src = rp.buffers[size_t(t.reads[0])];
          if (src.category == TensorCategory::Parameter) ++weight_casts[src.name];
        }
      }
      CHECK(fp8 > 0);
      CHECK(bf16 > 0);  // the LM head's three GEMMs
      CHECK(casts > 0);
      // A weight is cast once per step, whatever the micro-batches.
      CHECK(weight_casts.size() == size_t(4 * job.model.layers));
      for (const auto& [name, n] : weight_casts) {
        INFO(name);
        CHECK(n == 1);
      }
      requireFreshCopies(rp);
      // The same products as the bf16 plan, in FP8 (2 m n k each; the
      // tasks' FLOPs also count what fusion folds into them).
      JobSpec bf16_job = job;
      bf16_job.training.precision = Precision::BF16;
      const Plan plain = buildPlan(bf16_job);
      auto products = [](const RankPlan& p) {
        double f = 0;
        for (const Task& t : p.tasks)
          if (isGemm(t.op)) f += 2.0 * double(t.attrs.m) * double(t.attrs.n) * double(t.attrs.k);
        return f;
      };
      CHECK(products(rp) == Approx(products(plain.programs[0])));
    }
}

TEST_CASE("FP8 plans: the first and last blocks the job keeps in bf16 run their GEMMs in bf16", "[plan][fp8]") {
  for (Fp8Scaling scaling : {Fp8Scaling::Current, Fp8Scaling::Delayed}) {
    JobSpec job = test::llamaJob(1, 2, /*layers=*/4);
    job.training.precision = Precision::FP8;
    job.training.fp8_scaling = scaling;
    job.training.fp8_bf16_first_layers = 1;
    job.training.fp8_bf16_last_layers = 1;
    INFO(toString(scaling));
    const Plan plan = buildPlan(job);
    const RankPlan& rp = plan.programs[0];
    std::set<int> fp8_layers, bf16_layers;
    std::set<std::string> cast_sources;
    for (const Task& t : rp.tasks) {
      if (isGemm(t.op)) (t.attrs.fp8 ? fp8_layers : bf16_layers).insert(t.layer);
      if (t.op == OpKind::CastFp8 || (t.attrs.fp8_transposed_out && t.op != OpKind::CastFp8)) {
        INFO(t.name);  // casts and FP8-writing activations serve FP8 blocks only
        CHECK(t.layer >= 1);
        CHECK(t.layer <= 2);
      }
    }
    CHECK(fp8_layers == std::set<int>{1, 2});
    CHECK(bf16_layers == std::set<int>{-1, 0, 3});  // the LM head, the first and the last block
    requireFreshCopies(rp);
    // The CPU reference runs it: finite losses, not equal to an all-FP8
    // plan's (the kept blocks round differently).
    cpu::CpuExecutor kept(plan);
    JobSpec all = job;
    all.training.fp8_bf16_first_layers = all.training.fp8_bf16_last_layers = 0;
    cpu::CpuExecutor every(buildPlan(all));
    const float a = kept.step().loss, b = every.step().loss;
    CHECK(std::isfinite(a));
    CHECK(a != b);
  }
  JobSpec too_many = test::llamaJob(1, 1, /*layers=*/2);
  too_many.training.precision = Precision::FP8;
  too_many.training.fp8_bf16_first_layers = 2;
  too_many.training.fp8_bf16_last_layers = 1;
  CHECK_THROWS_WITH(parseJob(jobToYaml(too_many), "too_many.yaml"),
                    Catch::Contains("fp8_bf16_first_layers + fp8_bf16_last_layers = 3 blocks kept in bf16"));
}

TEST_CASE("FP8 plans: norms and activations write their GEMM inputs in FP8", "[plan][fp8]") {
  const Plan plan = buildPlan(fp8Job(true));
  const RankPlan& rp = plan.programs[0];
  int fused = 0;
  for (const Task& t : rp.tasks) {
    if (t.op != OpKind::RmsNorm && t.op != OpKind::SwiGlu && t.op != OpKind::SwiGluBwd) continue;
    if (t.layer < 0) continue;  // the final norm feeds the bf16 LM head
    INFO(t.name);
    CHECK(rp.buffers[size_t(t.writes[0])].dtype == DType::F8);
    ++fused;
  }
  CHECK(fused > 0);
  // The attention's output is read by its backward too: cast, not fused.
  for (const Task& t : rp.tasks)
    if (t.op == OpKind::Attention) CHECK(rp.buffers[size_t(t.writes[0])].dtype == DType::BF16);
}

TEST_CASE("FP8 delayed scaling on the GPU: a cast key per writer of FP8, shared by micro-batches and recompute",
          "[plan][fp8]") {
  JobSpec job = fp8Job(true, RecomputePolicy::Full);
  job.training.grad_accum = 2;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  const gpu_footprint::Fp8DelayedKeys keys = gpu_footprint::fp8DelayedKeys(rp);
  REQUIRE(keys.of_task.size() == rp.tasks.size());
  std::set<std::string> names(keys.names.begin(), keys.names.end());
  CHECK(names.size() == keys.names.size());
  int recomputed = 0;
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    const bool writes_fp8 = std::any_of(t.writes.begin(), t.writes.end(),
                                        [&](int b) { return rp.buffers[size_t(b)].dtype == DType::F8; });
    INFO(t.name);
    CHECK((keys.of_task[i] >= 0) == writes_fp8);
    if (!writes_fp8) continue;
    const int k = keys.of_task[i];
    CHECK(keys.names[size_t(k)] == fp8CastKey(t.name));
    CHECK(keys.backward[size_t(k)] == (t.phase == Phase::Backward));
    recomputed += t.phase == Phase::Recompute;
  }
  CHECK(recomputed > 0);
  // Two micro-batches, one key: fewer keys than writers.
  CHECK(keys.names.size() * 2 <= size_t(std::count_if(keys.of_task.begin(), keys.of_task.end(),
                                                      [](int k) { return k >= 0; })));
  int64_t fp8_buffers = 0;
  for (const Buffer& b : rp.buffers) fp8_buffers += b.dtype == DType::F8;
  CHECK(gpu_footprint::fp8ScaleBytes(rp) == fp8_buffers * gpu_footprint::kFp8ScaleSlotBytes +
                                                gpu_footprint::fp8DelayedStateBytes(int(keys.names.size())));
  CHECK(gpu_footprint::fp8DelayedStateBytes(int(keys.names.size())) >=
        int64_t(keys.names.size()) * (kFp8History + 5) * 4);
}

TEST_CASE("FP8 plans with current scaling: producers write bf16, a cast reads twice unless its writer took the amax",
          "[plan][fp8]") {
  JobSpec job = fp8Job(true);
  const Plan delayed = buildPlan(job);
  job.training.fp8_scaling = Fp8Scaling::Current;
  const Plan current = buildPlan(job);
  const RankPlan& rp = current.programs[0];
  int casts = 0, by_writer = 0;
  for (const Task& t : rp.tasks) {
    if (t.op == OpKind::RmsNorm || t.op == OpKind::SwiGlu || t.op == OpKind::SwiGluBwd)
      CHECK(rp.buffers[size_t(t.writes[0])].dtype != DType::F8);
    if (t.op != OpKind::CastFp8) continue;
    ++casts;
    INFO(t.name);
    CHECK(t.attrs.current_scaling);
    const int64_t in = rp.buffers[size_t(t.reads[0])].bytes;
    int64_t out = 0;
    for (int w : t.writes) out += rp.buffers[size_t(w)].bytes;
    CHECK(t.bytes_read == (t.attrs.amax_by_writer ? 1 : 2) * in);
    CHECK(t.bytes_written == out);
    by_writer += t.attrs.amax_by_writer;
  }
  CHECK(by_writer > 0);
  // Every GEMM input the producers wrote in FP8 is cast now.
  int delayed_casts = 0;
  for (const Task& t : delayed.programs[0].tasks) {
    delayed_casts += t.op == OpKind::CastFp8;
    if (t.op == OpKind::CastFp8) CHECK_FALSE(t.attrs.current_scaling);
  }
  CHECK(casts > delayed_casts);
  requireFreshCopies(rp);
}

TEST_CASE("FP8 plans: the backward's GEMMs read the transposed copies their casts (or activations) wrote",
          "[plan][fp8]") {
  for (bool llama : {true, false})
    for (Fp8Scaling scaling : {Fp8Scaling::Current, Fp8Scaling::Delayed}) {
      JobSpec job = fp8Job(llama);
      job.training.fp8_scaling = scaling;
      const Plan plan = buildPlan(job);
      const RankPlan& rp = plan.programs[0];
      // A transposed copy -> its writer: a cast, or under delayed scaling an
      // elementwise activation or a norm writing FP8.
      std::map<int, const Task*> transposed_by;
      int activations = 0, norms = 0;
      for (const Task& t : rp.tasks) {
        if (!t.attrs.fp8_transposed_out) continue;
        INFO(t.name);
        REQUIRE(t.writes.size() >= 2);
        transposed_by[t.writes.back()] = &t;
        CHECK(rp.buffers[size_t(t.writes.back())].dtype == DType::F8);
        activations += t.op != OpKind::CastFp8;
        norms += t.op == OpKind::RmsNorm || t.op == OpKind::LayerNorm;
      }
      CHECK_FALSE(transposed_by.empty());
      CHECK((activations > 0) == (scaling == Fp8Scaling::Delayed));
      CHECK((norms > 0) == (scaling == Fp8Scaling::Delayed));
      int backward = 0, reads_own = 0;
      for (const Task& t : rp.tasks) {
        if (!isGemm(t.op) || !t.attrs.fp8) continue;
        INFO((llama ? "llama " : "gpt2 ") << (scaling == Fp8Scaling::Current ? "current " : "delayed ") << t.name);
        for (int slot : {0, 1}) {
          const int b = t.reads[size_t(slot)];
          const bool bit = t.attrs.fp8_transposed & (1 << slot);
          CHECK(bit == (transposed_by.count(b) > 0));  // a transposed copy is read as one, and only it
          if (!bit) continue;
          CHECK(fp8TransposedSlot(t.op, slot));
          const Buffer& source = rp.buffers[size_t(transposed_by.at(b)->writes[0])];
          const int64_t columns = source.shape.back();
          CHECK(rp.buffers[size_t(b)].shape == std::vector<int64_t>{columns, source.elementCount() / columns});
        }
        if (t.op == OpKind::Matmul) continue;
        ++backward;
        // Every K-major operand comes from a cast or from its producer: no
        // GEMM transposes one itself.
        const int wanted = t.op == OpKind::MatmulBwdData ? 2 : 3;
        CHECK(t.attrs.fp8_transposed == wanted);
        CHECK(gpu_footprint::fp8TransposeBytes(t) == 0);
        reads_own += t.attrs.fp8_transposed != wanted;
      }
      CHECK(backward > 0);
      CHECK(reads_own == 0);
      requireFreshCopies(rp);
    }
}

TEST_CASE("FP8 current scaling: SwiGLU's kernels take the amax of what their casts read", "[plan][fp8]") {
  JobSpec job = fp8Job(true);
  job.training.fp8_scaling = Fp8Scaling::Current;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  const auto pairs = gpu_footprint::fp8AmaxProducers(rp);
  int swiglu_casts = 0, flagged = 0;  // casts whose input a SwiGLU kernel wrote last; casts amax_by_writer
  std::map<int, int> last_writer;
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    if (t.op == OpKind::CastFp8) {
      const auto w = last_writer.find(t.reads[0]);
      const OpKind op = w == last_writer.end() ? OpKind::Add : rp.tasks[size_t(w->second)].op;
      const bool swiglu = op == OpKind::SwiGlu || op == OpKind::SwiGluBwd;
      swiglu_casts += swiglu;
      flagged += t.attrs.amax_by_writer;
      CHECK(t.attrs.amax_by_writer == swiglu);
    }
    for (int b : t.writes) last_writer[b] = int(i);
  }
  CHECK(swiglu_casts > 0);
  CHECK(flagged == swiglu_casts);
  CHECK(int(pairs.size()) == swiglu_casts);
  int forward = 0, backward = 0;
  for (const auto& [producer, cast] : pairs) {
    const Task& p = rp.tasks[size_t(producer)];
    const Task& c = rp.tasks[size_t(cast)];
    INFO(p.name << " -> " << c.name);
    CHECK(producer < cast);
    CHECK(c.op == OpKind::CastFp8);
    CHECK(c.reads[0] == p.writes[0]);
    forward += p.op == OpKind::SwiGlu;
    backward += p.op == OpKind::SwiGluBwd;
  }
  CHECK(forward > 0);
  CHECK(backward > 0);
  int64_t fp8_buffers = 0;
  for (const Buffer& b : rp.buffers) fp8_buffers += b.dtype == DType::F8;
  CHECK(gpu_footprint::fp8ScaleBytes(rp) ==
        fp8_buffers * gpu_footprint::kFp8ScaleSlotBytes + int64_t(pairs.size()) * gpu_footprint::kFp8AmaxPartialsBytes);
  // Delayed scaling's producers write FP8 themselves: no cast takes a
  // producer's amax.
  CHECK(gpu_footprint::fp8AmaxProducers(buildPlan(fp8Job(true)).programs[0]).empty());
  CHECK(gpu_footprint::fp8DelayedKeys(rp).names.empty());
  // Eager PyTorch's SwiGLU is a chain of kernels: its casts take the amax themselves.
  job.schedule.elementwise = ElementwiseKernels::Eager;
  for (const Task& t : buildPlan(job).programs[0].tasks) CHECK_FALSE(t.attrs.amax_by_writer);
}

TEST_CASE("The GPU executor runs FP8 plans whose FP8 writers it has kernels for, and refuses the others with the "
          "reason",
          "[plan][fp8]") {
  // Current scaling, the Llama family at shapes the executor's kernels take
  // (heads 16 wide; GEMM dimensions multiples of 16): runs.
  JobSpec current = fp8Job(true);
  current.training.fp8_scaling = Fp8Scaling::Current;
  current.model.hidden = 64;
  current.model.mlp_ratio = 2.75;
  current.model.seq_len = 32;
  CHECK_FALSE(gpuRunRefusal(buildPlan(current)).has_value());
  // Delayed scaling: the producers of FP8 (Llama's RMSNorm and SwiGLU,
  // GPT-2's LayerNorm and GELU) have GPU kernels writing FP8.
  JobSpec delayed = current;
  delayed.training.fp8_scaling = Fp8Scaling::Delayed;
  CHECK_FALSE(gpuRunRefusal(buildPlan(delayed)).has_value());
  JobSpec gpt2_delayed = fp8Job(false);
  gpt2_delayed.model.hidden = 64;
  gpt2_delayed.model.seq_len = 32;
  CHECK_FALSE(gpuRunRefusal(buildPlan(gpt2_delayed)).has_value());
  // GPT-2's writers take rows in fours only: 2 x 31 tokens are refused
  // with the reason (before anything is allocated).
  JobSpec gpt2_odd_rows = gpt2_delayed;
  gpt2_odd_rows.model.seq_len = 31;
  gpt2_odd_rows.training.micro_batch = 2;
  const auto refused = gpuRunRefusal(buildPlan(gpt2_odd_rows));
  REQUIRE(refused.has_value());
  CHECK_THAT(*refused, Catch::Contains("training.fp8_scaling=current"));
  // GPT-2 too (its linear layers' bias gradients from the FP8 gradients).
  JobSpec gpt2 = fp8Job(false);
  gpt2.training.fp8_scaling = Fp8Scaling::Current;
  gpt2.model.hidden = 64;
  gpt2.model.seq_len = 32;
  CHECK_FALSE(gpuRunRefusal(buildPlan(gpt2)).has_value());
  // A dimension Hopper's FP8 GEMMs cannot take.
  JobSpec ragged = current;
  ragged.model.seq_len = 36;
  const auto odd = gpuRunRefusal(buildPlan(ragged));
  REQUIRE(odd.has_value());
  CHECK_THAT(*odd, Catch::Contains("multiple of 16"));
  // bf16 and fp32 plans have no casts.
  JobSpec bf16 = fp8Job(false);
  bf16.training.precision = Precision::BF16;
  const Plan plain = buildPlan(bf16);
  for (const Task& t : plain.programs[0].tasks) CHECK(t.op != OpKind::CastFp8);
}

TEST_CASE("FP8 delayed scaling with training.fp8_attention_grad: the grouped attention's backward writes its "
          "gradient in FP8, both layouts, where its tensor-core kernels take the heads",
          "[plan][fp8]") {
  // Heads 64 wide (the kernels take 64 and 128), two query heads per
  // key/value head.
  JobSpec job = fp8Job(true);
  job.model.hidden = 128;
  job.model.heads = 2;
  job.model.kv_heads = 1;
  job.model.seq_len = 32;
  CHECK_FALSE(job.training.fp8_attention_grad);  // Transformer Engine's cast by default
  job.training.fp8_attention_grad = true;
  const int tasks = job.model.layers * job.training.grad_accum;  // an attention backward per block and micro-batch
  auto attentionWritesFp8 = [](const Plan& plan) {
    const RankPlan& rp = plan.programs[0];
    int fp8 = 0, bf16 = 0;
    for (const Task& t : rp.tasks) {
      if (t.op != OpKind::AttentionBwd) continue;
      INFO(t.name);
      const bool codes = rp.buffers[size_t(t.writes[0])].dtype == DType::F8;
      CHECK(codes == t.attrs.fp8_out);
      if (!codes) {
        ++bf16;
        continue;
      }
      ++fp8;
      // Its transposed copy is the weight-gradient GEMM's K-major operand,
      // the codes the data-gradient GEMM's; no cast reads either.
      REQUIRE(t.attrs.fp8_transposed_out);
      const int rows = t.writes.front(), cols = t.writes.back();
      CHECK(rp.buffers[size_t(cols)].shape ==
            std::vector<int64_t>{rp.buffers[size_t(rows)].shape.back(),
                                 rp.buffers[size_t(rows)].elementCount() / rp.buffers[size_t(rows)].shape.back()});
      int readers = 0;
      for (const Task& r : rp.tasks) {
        const bool reads_rows = std::count(r.reads.begin(), r.reads.end(), rows) > 0;
        const bool reads_cols = std::count(r.reads.begin(), r.reads.end(), cols) > 0;
        if (!reads_rows && !reads_cols) continue;
        INFO(r.name);
        CHECK(r.op != OpKind::CastFp8);
        if (r.op == OpKind::MatmulBwdData) CHECK((reads_rows && r.attrs.fp8));
        if (r.op == OpKind::MatmulBwdWeight) CHECK((reads_cols && (r.attrs.fp8_transposed & 1)));
        ++readers;
      }
      CHECK(readers == 2);
    }
    return std::pair{fp8, bf16};
  };
  const Plan fused = buildPlan(job);
  CHECK(attentionWritesFp8(fused) == std::pair{tasks, 0});
  requireFreshCopies(fused.programs[0]);
  CHECK_FALSE(gpuRunRefusal(fused).has_value());
  // Transformer Engine's way (training.fp8_attention_grad false), current
  // scaling (the scale needs the finished gradient) and heads 16 wide (no
  // tensor-core kernel): bf16, and a cast before the QKV projection's GEMMs.
  JobSpec separate = job;
  separate.training.fp8_attention_grad = false;
  JobSpec current = job;
  current.training.fp8_scaling = Fp8Scaling::Current;
  JobSpec narrow = job;
  narrow.model.heads = 8;
  narrow.model.kv_heads = 4;
  for (const JobSpec& j : {separate, current, narrow}) {
    const Plan plan = buildPlan(j);
    CHECK(attentionWritesFp8(plan) == std::pair{0, tasks});
    requireFreshCopies(plan.programs[0]);
    const auto casts = std::count_if(plan.programs[0].tasks.begin(), plan.programs[0].tasks.end(), [](const Task& t) {
      return t.op == OpKind::CastFp8 && t.name.find("attn.qkv.bwd_data.cast_dy") != std::string::npos;
    });
    CHECK(casts == tasks);
  }
  // The option round-trips through the job's YAML, and the CPU reference
  // trains both ways alike: the codes of the same values, from fp32 where
  // the cast rounds the bf16 gradient first.
  CHECK(parseJob(jobToYaml(separate), "separate.yaml").training.fp8_attention_grad == false);
  CHECK(parseJob(jobToYaml(job), "fused.yaml").training.fp8_attention_grad == true);
  cpu::CpuExecutor a(fused), b(buildPlan(separate));
  for (int step = 0; step < 3; ++step) {
    const float la = a.step().loss, lb = b.step().loss;
    INFO("step " << step);
    CHECK(std::isfinite(la));
    CHECK(la == Approx(lb).epsilon(2e-3));
  }
  // The GPU executor's kernels store words of four tokens in the
  // transposed copy: other sequence lengths are refused with the way out.
  JobSpec ragged = job;
  ragged.model.seq_len = 30;
  ragged.training.micro_batch = 8;  // 240 tokens: the FP8 GEMMs' multiple of 16
  const auto refused = gpuRunRefusal(buildPlan(ragged));
  REQUIRE(refused.has_value());
  CHECK_THAT(*refused, Catch::Contains("training.fp8_attention_grad=false"));
}

TEST_CASE("FP8 with training.fp8_param_gather: parameter all-gathers move the FP8 GEMMs' weights as FP8 codes, "
          "which those GEMMs read uncast",
          "[plan][fp8]") {
  for (bool zero3 : {true, false}) {
    INFO((zero3 ? "parameters sharded (ZeRO-3)" : "optimizer sharded (ZeRO-1)"));
    JobSpec job = test::llamaJob(2, 2);
    job.training.precision = Precision::FP8;
    job.training.fp8_scaling = Fp8Scaling::Current;
    job.parallel.shard_optimizer = true;
    job.parallel.shard_parameters = zero3;
    JobSpec gathered = job;
    gathered.training.fp8_param_gather = true;
    CHECK(parseJob(jobToYaml(gathered), "gathered.yaml").training.fp8_param_gather);
    const Plan before = buildPlan(job), after = buildPlan(gathered);
    const RankPlan &b = before.programs.at(0), &a = after.programs.at(0);

    // Weight casts: ZeRO-3 casts each gathered copy before, none after; the
    // sharded optimizer's weights, gathered once a step, keep their one cast
    // a step (the transposed copy); the activations' casts stay.
    auto weightCasts = [](const RankPlan& rp) {
      int n = 0;
      for (const Task& t : rp.tasks)
        if (t.op == OpKind::CastFp8 && t.name.find(".cast_w.") != std::string::npos) ++n;
      return n;
    };
    auto casts = [](const RankPlan& rp) {
      return std::count_if(rp.tasks.begin(), rp.tasks.end(), [](const Task& t) { return t.op == OpKind::CastFp8; });
    };
    CHECK(weightCasts(b) > 0);
    CHECK(weightCasts(a) == (zero3 ? 0 : weightCasts(b)));
    CHECK(casts(b) - casts(a) == weightCasts(b) - weightCasts(a));

    // Each parameter gather moves one byte fewer per FP8 GEMM weight element
    // it carries: the blocks' four projections (two layers), 16 x 48 + 16 x 16
    // + 16 x 80 + 40 x 16 elements per layer at width 16, kv 2 of 4 heads,
    // SwiGLU 40 wide; the norm weights, the embedding and the LM head stay bf16.
    const int64_t per_layer = 16 * (16 + 2 * 8) + 16 * 16 + 16 * 80 + 40 * 16;
    int64_t saved = 0, gathers = 0;
    for (size_t i = 0; i < a.tasks.size(); ++i) {
      const Task& t = a.tasks[i];
      if (t.op != OpKind::AllGather || t.name.rfind("comm.allgather.bucket", 0) != 0) continue;
      const auto same = std::find_if(b.tasks.begin(), b.tasks.end(), [&](const Task& o) { return o.name == t.name; });
      REQUIRE(same != b.tasks.end());
      REQUIRE(t.collective.has_value());
      CHECK(t.collective->count == same->collective->count);
      saved += same->collective->bytes - t.collective->bytes;
      ++gathers;
    }
    REQUIRE(gathers > 0);
    // ZeRO-3 gathers every bucket per micro-batch (2) and direction (2); the
    // sharded optimizer once a step.
    CHECK(saved == per_layer * job.model.layers * (zero3 ? 4 : 1));

    // The FP8 GEMMs read FP8 weights nonetheless; under ZeRO-3 the data
    // gradient's GEMM transposes the gathered weight itself (no cast wrote
    // a K-major copy).
    for (const Task& t : a.tasks) {
      if (!t.attrs.fp8) continue;
      INFO(t.name);
      for (int slot : {0, 1}) CHECK(a.buffers.at(size_t(t.reads.at(size_t(slot)))).dtype == DType::F8);
      if (t.op == OpKind::MatmulBwdData) CHECK(gpu_footprint::fp8TransposeCount(t) == (zero3 ? 1 : 0));
    }

    // Both executors gather bf16: refused with the way out.
    const auto gpu = gpuRunRefusal(after);
    REQUIRE(gpu.has_value());
    CHECK_THAT(*gpu, Catch::Contains("training.fp8_param_gather") && Catch::Contains("tandem run"));
    CHECK_THROWS_WITH(cpu::CpuExecutor(after), Catch::Contains("training.fp8_param_gather") &&
                                                   Catch::Contains("tandem train"));
    // Without gathered parameters it changes nothing.
    JobSpec replicated = gathered;
    replicated.parallel.shard_optimizer = replicated.parallel.shard_parameters = false;
    const auto unrelated = gpuRunRefusal(buildPlan(replicated));
    CHECK((!unrelated || unrelated->find("fp8_param_gather") == std::string::npos));
  }
}
