#include "engine/plan/planner.h"

#include <fmt/format.h>

#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "engine/ir/autodiff.h"
#include "engine/ir/cost.h"
#include "engine/ir/graph.h"
#include "engine/ir/model.h"
#include "engine/passes/bias_grad.h"
#include "engine/passes/framework_kernels.h"
#include "engine/passes/buckets.h"
#include "engine/passes/embedding_gather.h"
#include "engine/passes/fp8_gemms.h"
#include "engine/passes/fusion.h"
#include "engine/passes/hybrid_shard.h"
#include "engine/passes/lm_head_chunks.h"
#include "engine/passes/micro_batch_reduce.h"
#include "engine/passes/pipeline.h"
#include "engine/passes/recompute.h"
#include "engine/passes/shard_parameters.h"
#include "engine/passes/tensor_parallel.h"
#include "engine/passes/pipeline_scatter_gather.h"
#include "engine/passes/tp_comm_overlap.h"
#include "engine/plan/lower.h"
#include "engine/plan/process_groups.h"

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
  std::unordered_map<int, OpKind> producer;
  for (const Node& n : g.nodes)
    if (n.phase == Phase::Forward)
      for (int t : n.outputs) producer.emplace(t, n.op);
  std::vector<RecomputeDecision> out;
  for (int l = 0; l < job.model.layers; ++l) {
    RecomputeDecision d;
    d.layer = l;
    d.policy = job.recompute.forLayer(l);
    if (auto it = saved.find(l); it != saved.end())
      for (int t : it->second) {
        const Tensor& x = g.tensor(t);
        (recomputeDrops(d.policy, x.role, producer.at(t)) ? d.bytes_saved : d.bytes_kept) += x.bytes();
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

// One stage's graph (the whole model without a pipeline), lowered.
struct StagePlan {
  RankPlan program;
  std::vector<RecomputeDecision> decisions;  // of the stage's layers
  int64_t parameters = 0;                   // whole model parameters (slices counted whole)
};

StagePlan planStage(const JobSpec& job, const PipelineStage& stage) {
  Graph g;
  std::vector<ModelParams> params;  // per chunk
  for (const ModelChunk& chunk : stage.chunks) params.push_back(addModelParameters(g, job, chunk));
  const int wte = stage.first() ? params.front().wte : params.back().lm_head;  // the tied embedding's copy here
  GradientState grads(g);
  const int accum = job.training.grad_accum;
  // Per token of the rank's: the replicas' average (context-parallel ranks
  // among them, each with an equal share of the tokens) is the global mean.
  const double loss_scale = 1.0 / (double(job.training.micro_batch) * double(job.rankSeqLen()) * accum);
  std::vector<MicroBatchNodes> micro_batches;  // per micro-batch, its chunks in order
  for (int mb = 0; mb < accum; ++mb) {
    // Gradients reduced every micro-batch start afresh in each.
    if (mb > 0 && reducesEveryMicroBatch(job)) grads.restartParameterGradients();
    for (size_t c = 0; c < stage.chunks.size(); ++c) {
      const ModelChunk& chunk = stage.chunks[c];
      MicroBatchNodes nodes;
      nodes.forward_begin = g.nodes.size();
      const ForwardOutputs fwd = emitForward(g, job, params[c], mb, chunk);
      nodes.backward_begin = g.nodes.size();
      if (!chunk.last()) {
        // The backward starts from the gradient of the chunk's output, which
        // the next chunk's stage sends back.
        const int dy = g.addCopyOf(fwd.stage_output, fmt::format("pipe.out.grad{}.mb{}", chunk.tag(), mb), -1, mb);
        g.tensor(dy).role = "pipe.out.grad";
        g.addNode(pipelineTransfer(g, OpKind::Recv, fmt::format("pipe.recv.bwd{}.mb{}", chunk.tag(), mb), dy,
                                   chunk.boundaryAfter(), Phase::Comm, mb));
        grads.alias(fwd.stage_output, dy);
      }
      emitBackward(g, grads, nodes.forward_begin, nodes.backward_begin, fwd.losses, loss_scale);
      if (!chunk.first())
        g.addNode(pipelineTransfer(g, OpKind::Send, fmt::format("pipe.send.bwd{}.mb{}", chunk.tag(), mb),
                                   grads.gradOf(fwd.stage_input), chunk.boundaryBefore(), Phase::Comm, mb));
      nodes.backward_end = g.nodes.size();
      micro_batches.push_back(nodes);
    }
  }
  if (stage.count > 1) orderOneForwardOneBackward(g, micro_batches, stage);
  applyTensorParallelBackward(g, job);
  applyLmHeadChunks(g, job);

  StagePlan out;
  out.decisions = keptAndSaved(g, job);
  applyRecompute(g, job);
  addRecomputeFlops(g, out.decisions);
  applyBiasGradientFusion(g, job);
  applySequenceParallelGradientSum(g, job);
  applyTiedEmbeddingSum(g, job, stage, wte);
  applyGradientBuckets(g, job);
  applyMicroBatchReduce(g, job);
  applyReplicaAllReduce(g, job);
  applyGatheredEmbeddingGradient(g, job);
  applyGradientReduceInFp32(g, job);
  appendOptimizer(g, job);
  applyParameterSharding(g, job);
  applyFp8Gemms(g, job);
  applyTpCommOverlap(g, job);
  applyPipelineScatterGather(g, job);
  markFrameworkKernels(g, job);

  std::vector<int> ranks;
  for (int replica = 0; replica < job.replicas(); ++replica)
    for (int place = 0; place < job.parallel.tensor_parallel; ++place)
      ranks.push_back(job.rankAt(stage.index, replica, place));
  LowerOptions lower;
  lower.weight_gradient_stream = job.schedule.weight_gradient_stream;
  lower.join_side_stream_per_micro_batch = reducesEveryMicroBatch(job);
  out.program = lowerGraph(g, std::move(ranks), lower);
  // Reads the memory plan, so after lowering. Eager PyTorch launches each
  // op on its own: no epilogue does an elementwise op's work.
  if (job.schedule.elementwise != ElementwiseKernels::Eager)
    applyEpilogueFusion(out.program, job.schedule.residual_in_gemm);
  // The model's parameters: a tensor-parallel slice is 1/tensor_parallel of
  // one; the tied embedding's copy on the last stage is not another.
  for (const auto& p : g.params) {
    if (!stage.first() && p.param == wte && job.model.tied_embeddings) continue;
    out.parameters += g.tensor(p.param).elements() * (p.split_dim >= 0 ? job.parallel.tensor_parallel : 1);
  }
  return out;
}

}  // namespace

Plan buildPlan(const JobSpec& job) {
  Plan plan;
  plan.job = job;
  refreshJobText(plan.job);  // jobs edited in code carry the YAML and hash of what is planned
  plan.world_size = job.worldSize();
  plan.groups = processGroups(job);
  plan.recompute.resize(size_t(job.model.layers));
  double flops = 0;
  for (int s = 0; s < job.parallel.pipeline_parallel; ++s) {
    const PipelineStage stage = pipelineStage(job, s);
    StagePlan sp = planStage(job, stage);
    for (const ModelChunk& chunk : stage.chunks)
      for (int l = chunk.first_layer; l < chunk.end_layer; ++l) plan.recompute[size_t(l)] = sp.decisions[size_t(l)];
    plan.summary.parameters += sp.parameters;
    double program_flops = 0;
    for (const Task& t : sp.program.tasks) program_flops += t.flops;
    flops += program_flops * double(sp.program.ranks.size());
    plan.programs.push_back(std::move(sp.program));
  }
  // Every task of every rank.
  plan.summary.flops_per_step = flops;
  const auto& m = job.model;
  // PaLM (appendix B): 6N + 12 L H Q T, with H Q = hidden. N counts all
  // parameters, as the PyTorch peer and llm.c do.
  plan.summary.model_flops_per_token =
      6.0 * double(plan.summary.parameters) + 12.0 * m.layers * double(m.hidden) * m.seq_len;
  plan.summary.tokens_per_step = job.tokensPerStep();
  return plan;
}

}  // namespace tandem
