#include "engine/planner.h"

#include <fmt/format.h>

#include <map>
#include <numeric>
#include <set>

#include "engine/autodiff.h"
#include "engine/cost.h"
#include "engine/graph.h"
#include "engine/lower.h"
#include "engine/model_gpt2.h"
#include "engine/pass_bias_grad.h"
#include "engine/pass_buckets.h"
#include "engine/pass_embedding_gather.h"
#include "engine/pass_lm_head_chunks.h"
#include "engine/pass_micro_batch_reduce.h"
#include "engine/pass_fusion.h"
#include "engine/pass_hybrid_shard.h"
#include "engine/pass_recompute.h"
#include "engine/pass_shard_parameters.h"
#include "engine/pass_tensor_parallel.h"
#include "engine/process_groups.h"

namespace tandem {
namespace {

// Per layer: the forward activations of micro-batch 0 that the backward
// reads, before recompute decides which of them to drop.
std::map<int, std::set<int>> savedForBackward(const Graph& g) {
  std::map<int, std::set<int>> saved;
  std::set<int> forward_outputs;
  for (const Node& n : g.nodes)
    if (n.phase == Phase::Forward && n.micro_batch == 0)
      forward_outputs.insert(n.outputs.begin(), n.outputs.end());
  for (const Node& n : g.nodes) {
    if (n.phase != Phase::Backward || n.micro_batch != 0) continue;
    for (int t : n.inputs) {
      const Tensor& x = g.tensor(t);
      if (x.layer >= 0 && x.category == TensorCategory::Activation && forward_outputs.count(t))
        saved[x.layer].insert(t);
    }
  }
  return saved;
}

std::vector<RecomputeDecision> keptAndSaved(const Graph& g, const JobSpec& job) {
  const auto saved = savedForBackward(g);
  std::vector<RecomputeDecision> out;
  for (int l = 0; l < job.model.layers; ++l) {
    RecomputeDecision d;
    d.layer = l;
    d.policy = job.recompute.forLayer(l);
    if (auto it = saved.find(l); it != saved.end())
      for (int t : it->second) {
        const Tensor& x = g.tensor(t);
        (recomputeDrops(d.policy, x.role) ? d.bytes_saved : d.bytes_kept) += x.bytes();
      }
    out.push_back(d);
  }
  return out;
}

void addRecomputeFlops(const Graph& g, std::vector<RecomputeDecision>& decisions) {
  for (const Node& n : g.nodes)
    if (n.phase == Phase::Recompute && n.layer >= 0 && n.layer < int(decisions.size()))
      decisions[n.layer].extra_flops += costOf(g, n).flops;
}

PlanSummary summarize(const Graph& g, const RankPlan& rp, const JobSpec& job) {
  PlanSummary s;
  // The model's parameters: a tensor-parallel slice is 1/tensor_parallel of one.
  for (const auto& p : g.params)
    s.parameters += g.tensor(p.param).elements() * (p.split_dim >= 0 ? job.parallel.tensor_parallel : 1);
  double flops = 0;
  for (const Task& t : rp.tasks) flops += t.flops;
  s.flops_per_step = flops * job.worldSize();
  const auto& m = job.model;
  // PaLM (appendix B): 6N + 12 L H Q T, with H Q = hidden. N counts all
  // parameters, as the PyTorch peer and llm.c do.
  s.model_flops_per_token = 6.0 * double(s.parameters) + 12.0 * m.layers * double(m.hidden) * m.seq_len;
  s.tokens_per_step = job.tokensPerStep();
  return s;
}

}  // namespace

Plan buildPlan(const JobSpec& job) {
  Graph g;
  const Gpt2Params params = addGpt2Parameters(g, job);
  GradientState grads(g);
  const int accum = job.training.grad_accum;
  const double loss_scale =
      1.0 / (double(job.training.micro_batch) * job.model.seq_len * accum);
  for (int mb = 0; mb < accum; ++mb) {
    // Gradients reduced every micro-batch start afresh in each.
    if (mb > 0 && reducesEveryMicroBatch(job)) grads.restartParameterGradients();
    const size_t first = g.nodes.size();
    const ForwardOutputs fwd = emitGpt2Forward(g, job, params, mb);
    emitBackward(g, grads, first, g.nodes.size(), fwd.losses, loss_scale);
  }
  applyTensorParallelBackward(g, job);
  applyLmHeadChunks(g, job);

  std::vector<RecomputeDecision> decisions = keptAndSaved(g, job);
  applyRecompute(g, job);
  addRecomputeFlops(g, decisions);
  applyBiasGradientFusion(g, job);
  applyGradientBuckets(g, job);
  applyMicroBatchReduce(g, job);
  applyReplicaAllReduce(g, job);
  applyGatheredEmbeddingGradient(g, job);
  appendOptimizer(g, job);
  applyParameterSharding(g, job);

  Plan plan;
  plan.job = job;
  refreshJobText(plan.job);  // jobs edited in code carry the YAML and hash of what is planned
  plan.world_size = job.worldSize();
  plan.groups = processGroups(job);
  std::vector<int> ranks(size_t(plan.world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  LowerOptions lower;
  lower.weight_gradient_stream = job.schedule.weight_gradient_stream;
  lower.join_side_stream_per_micro_batch = reducesEveryMicroBatch(job);
  plan.programs.push_back(lowerGraph(g, std::move(ranks), lower));
  // Reads the memory plan, so after lowering.
  applyEpilogueFusion(plan.programs.back(), job.schedule.residual_in_gemm);
  plan.recompute = std::move(decisions);
  plan.summary = summarize(g, plan.programs.front(), job);
  return plan;
}

}  // namespace tandem
