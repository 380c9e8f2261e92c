#include "engine/plan/gpu_support.h"

#include <fmt/format.h>

#include "engine/passes/buckets.h"
#include "engine/passes/fp8_gemms.h"
#include "engine/plan/plan.h"

namespace tandem {

namespace {

// Under delayed scaling the kinds that write FP8 themselves on the GPU
// (engine/cuda/llama.cu, layernorm.cu, elementwise.cu, attention_tc.cu):
// the casts, the norms, SwiGLU, GELU and the grouped attention's backward.
bool writesFp8OnGpu(OpKind op) {
  return op == OpKind::CastFp8 || op == OpKind::RmsNorm || op == OpKind::SwiGlu || op == OpKind::SwiGluBwd ||
         op == OpKind::LayerNorm || op == OpKind::Gelu || op == OpKind::GeluBwd || op == OpKind::AttentionBwd;
}

// training.precision fp8: the executor runs the casts (current or delayed
// scaling) and the FP8 GEMMs on one rank's own tensors.
std::optional<std::string> fp8Refusal(const Plan& plan) {
  if (plan.job.training.precision != Precision::FP8) return std::nullopt;
  if (const std::optional<std::string> why = fp8ParamGatherRefusal(plan.job, "tandem run")) return why;
  for (const RankPlan& rp : plan.programs) {
    for (const Task& t : rp.tasks) {
      for (int b : t.writes)
        if (rp.buffers.at(size_t(b)).dtype == DType::F8 && !writesFp8OnGpu(t.op))
          return fmt::format("under FP8 delayed scaling {} ({}) writes FP8 itself, which the GPU executor does for "
                             "casts, norms, SwiGLU, GELU and the attention's backward only; set "
                             "training.fp8_scaling=current, or `tandem "
                             "simulate` and `tandem train` run it",
                             t.name, toString(t.op));
      // GPT-2's writers have the tiled kernels only: both layouts, whole
      // 16-byte vectors, rows in fours, nothing accumulated.
      const bool gpt2_writer = t.op == OpKind::LayerNorm || t.op == OpKind::Gelu || t.op == OpKind::GeluBwd;
      if (t.attrs.fp8_out && gpt2_writer) {
        const Buffer& y = rp.buffers.at(size_t(t.writes.at(0)));
        const int64_t cols = y.shape.empty() ? 0 : y.shape.back();
        const int64_t rows = cols > 0 ? y.elementCount() / cols : 0;
        if (!t.attrs.fp8_transposed_out || cols % 8 != 0 || rows % 4 != 0 || t.attrs.accumulate)
          return fmt::format("under FP8 delayed scaling {} writes FP8 [{} x {}]{}{}: the GPU executor's writer takes "
                             "both layouts of rows a multiple of 4 and columns of 8, not accumulated; set "
                             "training.fp8_scaling=current",
                             t.name, rows, cols, t.attrs.fp8_transposed_out ? "" : " without its transposed copy",
                             t.attrs.accumulate ? ", accumulating" : "");
      }
      // The attention's backward stores its FP8 gradient in both layouts,
      // each transposed word four tokens long.
      if (t.attrs.fp8_out && t.op == OpKind::AttentionBwd && (!t.attrs.fp8_transposed_out || t.attrs.t % 4 != 0))
        return fmt::format("under FP8 delayed scaling {} writes its gradient in FP8{} over sequences of {}: the GPU "
                           "executor's attention writes both layouts of sequences a multiple of 4 long; set "
                           "training.fp8_attention_grad=false",
                           t.name, t.attrs.fp8_transposed_out ? "" : " without its transposed copy", t.attrs.t);
      if (t.attrs.fp8 && (t.attrs.m % 16 != 0 || t.attrs.n % 16 != 0 || t.attrs.k % 16 != 0))
        return fmt::format("the FP8 GEMM {} is {} x {} x {}: Hopper's FP8 GEMMs need every dimension a multiple of "
                           "16 (model.hidden, the MLP width and the tokens per micro-batch)",
                           t.name, t.attrs.m, t.attrs.n, t.attrs.k);
      const bool moves = t.collective.has_value() || t.op == OpKind::Send || t.op == OpKind::Recv;
      if (moves)
        for (int b : t.reads)
          if (rp.buffers.at(size_t(b)).dtype == DType::F8)
            return fmt::format("{} moves FP8 copies between ranks (sequence parallelism with training.precision "
                               "fp8), which needs the group's common scale; not run on GPUs yet",
                               t.name);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> gpuRunRefusal(const Plan& plan) {
  const ParallelSpec& par = plan.job.parallel;
  const char* elsewhere = "`tandem simulate` and `tandem train` run such plans";
  if (plan.job.model.mlp_activation != MlpActivation::SwiGlu)
    return fmt::format("the squared-ReLU MLP (model.mlp_activation {}) is not run on GPUs yet; {}",
                       toString(plan.job.model.mlp_activation), elsewhere);
  if (std::optional<std::string> fp8 = fp8Refusal(plan)) return fp8;
  if (std::optional<std::string> reduce = gradReduceFp32Refusal(plan.job, "tandem run")) return reduce;
  if (plan.job.schedule.materialized_attention)
    return fmt::format("a materialized attention score matrix (schedule.materialized_attention) is planned and "
                       "simulated for what-if studies; the GPU executor runs the fused attention only; {}",
                       elsewhere);
  if (plan.job.schedule.attention_kernel != AttentionKernel::Fused ||
      plan.job.schedule.elementwise != ElementwiseKernels::Fused ||
      plan.job.schedule.projections != Projections::Fused)
    return fmt::format("another framework's kernels (schedule.attention_kernel {}, schedule.elementwise {}, "
                       "schedule.projections {}) are planned for what-if studies; the GPU executor runs its own "
                       "fused kernels, which a profile would then show under that framework's name; set all three "
                       "to fused to run it",
                       toString(plan.job.schedule.attention_kernel), toString(plan.job.schedule.elementwise),
                       toString(plan.job.schedule.projections));
  if (par.context_parallel > 1)
    return fmt::format("context parallelism (parallel.context_parallel {}) is not run on GPUs yet: the attention "
                       "kernels take whole sequences; {}",
                       par.context_parallel, elsewhere);
  // FP8 jobs keep their activations (and the attention) in bf16.
  const bool bf16 = plan.job.training.precision != Precision::FP32;
  // Every stage's program (pipeline stages differ).
  std::vector<const Task*> tasks;
  for (const RankPlan& rp : plan.programs)
    for (const Task& t : rp.tasks) tasks.push_back(&t);
  for (const Task* task : tasks) {
    const Task& t = *task;
    if (t.op != OpKind::Attention || t.attrs.h <= 0) continue;
    const int64_t width = t.attrs.c / t.attrs.h;
    if (width == 128 && !bf16)
      return fmt::format("attention heads 128 wide (model.hidden {} / model.heads {}) run on the tensor cores only, "
                         "in bf16 (training.precision is {}); {}",
                         plan.job.model.hidden, plan.job.model.heads, toString(plan.job.training.precision), elsewhere);
    if (!gpuAttentionHeadWidthSupported(width, bf16))
      return fmt::format("attention heads {} wide (model.hidden {} / model.heads {}) are not run on GPUs yet: the "
                         "attention kernels take heads 16, 32, 64 or (bf16) 128 wide; {}",
                         width, plan.job.model.hidden, plan.job.model.heads, elsewhere);
  }
  for (const Task* task : tasks) {
    const Task& t = *task;
    if (t.op == OpKind::EmbeddingBwd && t.attrs.shards > 1 && t.writes.size() < 2)
      return fmt::format("the gathered embedding gradient of a model without a position table "
                         "(comm.gather_embedding_gradient with model.family {}) is not run on GPUs yet; {}",
                         toString(plan.job.model.family), elsewhere);
    if (t.op == OpKind::EmbeddingBwd && t.attrs.shards > 1 && t.attrs.tensor_parallel > 1)
      return fmt::format("the gathered embedding gradient with the vocabulary split over tensor-parallel ranks "
                         "(comm.gather_embedding_gradient with parallel.tensor_parallel {}) is not run on GPUs yet; "
                         "{}",
                         par.tensor_parallel, elsewhere);
  }
  // Every process group gets a communicator of its own (split from the
  // world's), so tensor-parallel, data-parallel and hybrid-sharding groups
  // all run.
  return std::nullopt;
}

}  // namespace tandem
