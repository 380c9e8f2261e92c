#include "engine/passes/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/passes/buckets.h"

namespace tandem {

std::string ModelChunk::tag() const { return count == stages ? std::string() : fmt::format(".c{}", local()); }

PipelineStage pipelineStage(const JobSpec& job, int stage) {
  PipelineStage s;
  s.index = stage;
  s.count = job.parallel.pipeline_parallel;
  const int per_stage = std::max(1, job.parallel.pipeline_chunks);
  const int count = s.count * per_stage;
  const auto& split = job.parallel.pipeline_layers;
  // Blocks before chunk i.
  auto start = [&](int i) {
    if (split.empty()) return i * (job.model.layers / count);
    int first = 0;
    for (int k = 0; k < i; ++k) first += split.at(size_t(k));
    return first;
  };
  for (int i = stage; i < count; i += s.count) {
    ModelChunk c;
    c.index = i;
    c.count = count;
    c.stages = s.count;
    c.first_layer = start(i);
    c.end_layer = start(i + 1);
    s.chunks.push_back(c);
  }
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

namespace {

// Megatron-LM's interleaved schedule over the stage's v chunks, as (unit,
// is a forward) in issue order; units are numbered in build order,
// micro-batch k's chunk c being k * v + c.
std::vector<std::pair<int, bool>> interleavedOrder(int m, int v, const PipelineStage& stage) {
  const int p = stage.count, total = m * v;
  // The k-th forward (or backward) of the stage: micro-batches in groups of
  // p, each group through the chunks (the backwards' in reverse).
  auto unit = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    const int micro_batch = (k / (p * v)) * p + in_group % p;
    return micro_batch * v + chunk;
  };
  const int warmup = m == p ? total : std::min(total, 2 * (p - stage.index - 1) + (v - 1) * p);
  std::vector<std::pair<int, bool>> order;  // (unit, forward)
  for (int k = 0; k < warmup; ++k) order.emplace_back(unit(k, true), true);
  for (int k = 0; k < total - warmup; ++k) {
    order.emplace_back(unit(k + warmup, true), true);
    order.emplace_back(unit(k, false), false);
  }
  for (int k = total - warmup; k < total; ++k) order.emplace_back(unit(k, false), false);
  return order;
}

}  // namespace

void orderOneForwardOneBackward(Graph& g, const std::vector<MicroBatchNodes>& micro_batches,
                                const PipelineStage& stage) {
  if (micro_batches.empty()) return;
  if (micro_batches.front().forward_begin != 0 || micro_batches.back().backward_end != g.nodes.size())
    throw std::logic_error("pipeline: the micro-batches must cover the whole graph");
  const int v = int(stage.chunks.size());
  if (v < 1 || micro_batches.size() % size_t(v) != 0)
    throw std::logic_error("pipeline: every micro-batch must have the stage's chunks");
  const int m = int(micro_batches.size()) / v;
  std::vector<Node> ordered;
  ordered.reserve(g.nodes.size());
  auto take = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) ordered.push_back(std::move(g.nodes[i]));
  };
  auto forward = [&](int k) { take(micro_batches[size_t(k)].forward_begin, micro_batches[size_t(k)].backward_begin); };
  auto backward = [&](int k) { take(micro_batches[size_t(k)].backward_begin, micro_batches[size_t(k)].backward_end); };
  if (v > 1) {
    for (const auto& [k, is_forward] : interleavedOrder(m, v, stage)) {
      if (is_forward)
        forward(k);
      else
        backward(k);
    }
  } else {
    const int warmup = std::min(stage.count - stage.index - 1, m);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < m; ++k) {
      if (k + warmup < m) forward(k + warmup);
      backward(k);
    }
  }
  if (ordered.size() != g.nodes.size()) throw std::logic_error("pipeline: the schedule lost or repeated nodes");
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
