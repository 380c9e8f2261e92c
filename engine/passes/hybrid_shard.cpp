#include "engine/passes/hybrid_shard.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/passes/buckets.h"

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
    inserts.emplace_back(last, inPlaceAllReduce(g, shard, fmt::format("comm.allreduce.replicas.bucket{}", b),
                                                ReduceOp::Avg, "replica", Phase::Comm, StreamKind::Comm,
                                                job.training.grad_accum - 1));
  }
  g.insertNodes(std::move(inserts));
}

}  // namespace tandem
