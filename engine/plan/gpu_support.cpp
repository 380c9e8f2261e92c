#include "engine/plan/gpu_support.h"

#include <fmt/format.h>

#include "engine/plan/plan.h"

namespace tandem {

std::optional<std::string> gpuRunRefusal(const Plan& plan) {
  const ParallelSpec& par = plan.job.parallel;
  const char* elsewhere = "`tandem simulate` and `tandem train` run such plans";
  if (plan.job.model.mlp_activation != MlpActivation::SwiGlu)
    return fmt::format("the squared-ReLU MLP (model.mlp_activation {}) is not run on GPUs yet; {}",
                       toString(plan.job.model.mlp_activation), elsewhere);
  if (plan.job.training.precision == Precision::FP8)
    return fmt::format("FP8 GEMMs (training.precision fp8) are planned and simulated, not run on GPUs yet; "
                       "`tandem simulate` runs such plans");
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
  const bool bf16 = plan.job.training.precision == Precision::BF16;
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
