#include "engine/pass_hybrid_shard.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/pass_buckets.h"

namespace tandem {

void applyReplicaAllReduce(Graph& g, const JobSpec& job) {
  if (!hybridSharding(job)) return;
  std::vector<std::pair<size_t, Node>> inserts;  // (insert after node index, node)
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    const int shard = g.buckets[b].grad_shard;
    size_t last = g.nodes.size();
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (std::count(g.nodes[i].outputs.begin(), g.nodes[i].outputs.end(), shard)) last = i;
    if (last == g.nodes.size())
      throw std::logic_error(fmt::format("hybrid sharding: nothing writes the gradient shard of bucket {}", b));
    const Tensor& s = g.tensor(shard);
    Node n;
    n.op = OpKind::AllReduce;
    n.name = fmt::format("comm.allreduce.replicas.bucket{}", b);
    n.phase = Phase::Comm;
    n.stream = StreamKind::Comm;
    n.micro_batch = job.training.grad_accum - 1;
    n.inputs = {shard};
    n.outputs = {shard};
    n.attrs.elements = s.elements();
    n.collective = dataParallelCollective(CollectiveOp::AllReduce, ReduceOp::Avg, s.elements(), s.dtype, "replica");
    inserts.emplace_back(last, std::move(n));
  }
  g.insertNodes(std::move(inserts));
}

}  // namespace tandem
