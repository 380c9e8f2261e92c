#include "engine/passes/embedding_gather.h"

#include <algorithm>
#include <set>

#include "engine/passes/buckets.h"

namespace tandem {
namespace {

int rootOf(const Graph& g, int t) {
  const int parent = g.tensor(t).parent;
  return parent >= 0 ? parent : t;
}

bool writes(const Node& n, const std::set<int>& tensors, const Graph& g) {
  return std::any_of(n.outputs.begin(), n.outputs.end(),
                     [&](int t) { return tensors.count(t) || tensors.count(rootOf(g, t)); });
}

}  // namespace

int embeddingBackwardToGather(const Graph& g, const JobSpec& job) {
  if (!shardsOptimizer(job) || !job.comm.gather_embedding_gradient) return -1;
  const int last_mb = job.training.grad_accum - 1;
  for (int i = int(g.nodes.size()) - 1; i >= 0; --i) {
    const Node& n = g.nodes[size_t(i)];
    if (n.op != OpKind::EmbeddingBwd || n.micro_batch != last_mb) continue;
    int64_t bucket_bytes = 0;
    for (int t : n.outputs) bucket_bytes += g.tensor(t).bytes();
    const int64_t gathered_bytes = int64_t(job.replicas()) * g.tensor(n.inputs[0]).bytes();
    return gathered_bytes < bucket_bytes ? i : -1;
  }
  return -1;
}

bool applyGatheredEmbeddingGradient(Graph& g, const JobSpec& job) {
  if (g.buckets.empty()) return false;
  const int world = job.replicas();
  const int last_mb = job.training.grad_accum - 1;

  // The final embedding backward and the bucket it completes.
  const int emb = embeddingBackwardToGather(g, job);
  if (emb < 0) return false;
  const Node& embedding = g.nodes[size_t(emb)];
  const BucketTensors& bucket = g.buckets.back();
  std::set<int> bucket_grads;
  for (int p : bucket.params) bucket_grads.insert(g.params[p].grad);
  const std::set<int> written(embedding.outputs.begin(), embedding.outputs.end());
  if (bucket_grads != written) return false;
  if (!embedding.attrs.accumulate) return false;  // wte has no earlier contribution: untied

  // The bucket's reduce-scatter, and the last earlier node writing into it.
  std::set<int> bucket_tensors = bucket_grads;
  bucket_tensors.insert(bucket.flat);
  int scatter = -1, before = -1;
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& n = g.nodes[size_t(i)];
    if (n.op == OpKind::ReduceScatter && !n.inputs.empty() && n.inputs[0] == bucket.flat) scatter = i;
    if (i < emb && n.op != OpKind::ReduceScatter && writes(n, bucket_tensors, g)) before = i;
  }
  if (scatter < 0 || before < 0 || scatter < emb) return false;

  // The all-gather of the embedding's input gradient, right after the node
  // that finishes it.
  const int dy = embedding.inputs[0];
  int dy_done = -1;
  for (int i = 0; i < emb; ++i)
    if (std::count(g.nodes[size_t(i)].outputs.begin(), g.nodes[size_t(i)].outputs.end(), dy)) dy_done = i;
  if (dy_done < 0) return false;
  // A copy: addTensor below may reallocate the graph's tensors.
  const Tensor dy_t = g.tensor(dy);
  Tensor gathered;
  gathered.name = "embed.grad_input.gathered";
  gathered.dtype = dy_t.dtype;
  gathered.shape = {int64_t(world) * dy_t.elements()};
  gathered.category = dy_t.category;
  gathered.micro_batch = last_mb;
  const int gathered_id = g.addTensor(std::move(gathered));

  Node ag;
  ag.op = OpKind::AllGather;
  ag.name = "comm.allgather.embedding_grad";
  ag.phase = Phase::Comm;
  ag.stream = StreamKind::Comm;
  ag.micro_batch = last_mb;
  ag.inputs = {dy};
  ag.outputs = {gathered_id};
  ag.attrs.elements = int64_t(world) * dy_t.elements();
  ag.attrs.shards = world;
  ag.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, ag.attrs.elements, dy_t.dtype);

  Node& e = g.nodes[size_t(emb)];
  e.inputs[0] = gathered_id;
  e.attrs.shards = world;

  // Reorder: the reduce-scatter after `before`, the all-gather after `dy_done`.
  Node rs = std::move(g.nodes[size_t(scatter)]);
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + 1);
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    if (i == scatter) continue;
    nodes.push_back(std::move(g.nodes[size_t(i)]));
    if (i == before) nodes.push_back(std::move(rs));
    if (i == dy_done) nodes.push_back(std::move(ag));
  }
  g.nodes = std::move(nodes);
  return true;
}

}  // namespace tandem
