#include "engine/pass_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/pass_buckets.h"

namespace tandem {

PipelineStage pipelineStage(const JobSpec& job, int stage) {
  PipelineStage s;
  s.index = stage;
  s.count = job.parallel.pipeline_parallel;
  const auto& split = job.parallel.pipeline_layers;
  if (split.empty()) {
    const int per_stage = job.model.layers / s.count;
    s.first_layer = stage * per_stage;
    s.end_layer = s.first_layer + per_stage;
    return s;
  }
  for (int i = 0; i < stage; ++i) s.first_layer += split.at(size_t(i));
  s.end_layer = s.first_layer + split.at(size_t(stage));
  return s;
}

std::string pipelineBoundaryGroup(int boundary) { return fmt::format("pp{}", boundary); }

Node pipelineTransfer(const Graph& g, OpKind op, const std::string& name, int tensor, int boundary, Phase phase,
                      int micro_batch) {
  const Tensor& t = g.tensor(tensor);
  Node n;
  n.op = op;
  n.name = name;
  n.phase = phase;
  n.micro_batch = micro_batch;
  if (op == OpKind::Send)
    n.inputs = {tensor};
  else
    n.outputs = {tensor};
  n.attrs.elements = t.elements();
  n.collective = dataParallelCollective(op == OpKind::Send ? CollectiveOp::Send : CollectiveOp::Recv, ReduceOp::Sum,
                                        t.elements(), t.dtype, pipelineBoundaryGroup(boundary));
  n.stream = StreamKind::Comm;
  n.stream_name = op == OpKind::Send ? "comm.send" : "comm.recv";
  return n;
}

void orderOneForwardOneBackward(Graph& g, const std::vector<MicroBatchNodes>& micro_batches,
                                const PipelineStage& stage) {
  if (micro_batches.empty()) return;
  if (micro_batches.front().forward_begin != 0 || micro_batches.back().backward_end != g.nodes.size())
    throw std::logic_error("pipeline: the micro-batches must cover the whole graph");
  const int m = int(micro_batches.size());
  const int warmup = std::min(stage.count - stage.index - 1, m);
  std::vector<Node> ordered;
  ordered.reserve(g.nodes.size());
  auto take = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) ordered.push_back(std::move(g.nodes[i]));
  };
  auto forward = [&](int k) { take(micro_batches[size_t(k)].forward_begin, micro_batches[size_t(k)].backward_begin); };
  auto backward = [&](int k) { take(micro_batches[size_t(k)].backward_begin, micro_batches[size_t(k)].backward_end); };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int k = 0; k < m; ++k) {
    if (k + warmup < m) forward(k + warmup);
    backward(k);
  }
  g.nodes = std::move(ordered);
}

void applyTiedEmbeddingSum(Graph& g, const JobSpec& job, const PipelineStage& stage, int wte) {
  if (stage.count <= 1 || !job.model.tied_embeddings || !(stage.first() || stage.last())) return;
  int grad = -1;
  for (const ParamTensors& p : g.params)
    if (p.param == wte) grad = p.grad;
  if (grad < 0) throw std::logic_error("pipeline: the embedding has no gradient tensor");
  g.addNode(inPlaceAllReduce(g, grad, "comm.allreduce.tied_embedding", ReduceOp::Sum, "embed", Phase::Comm,
                             StreamKind::Comm, job.training.grad_accum - 1));
}

}  // namespace tandem
