#include "engine/passes/shard_parameters.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "engine/passes/buckets.h"

namespace tandem {
namespace {

// One gathered copy of a bucket's parameters.
struct GatheredCopy {
  int bucket = -1;
  int micro_batch = 0;
  bool backward = false;
  int flat = -1;
  std::map<int, int> views;  // parameter tensor -> its view in this copy
  size_t first_use = std::numeric_limits<size_t>::max();
};

using CopyKey = std::tuple<int, int, bool>;  // bucket, micro-batch, backward

bool readsParameters(Phase phase) {
  return phase == Phase::Forward || phase == Phase::Backward || phase == Phase::Recompute;
}

// The copy's flat tensor and a view of every parameter of the bucket, at
// the offsets the bucket's flat parameter tensor has them.
void makeCopy(Graph& g, GatheredCopy& copy) {
  const BucketTensors& bucket = g.buckets[size_t(copy.bucket)];
  const std::string where = fmt::format("{}.mb{}", copy.backward ? "bwd" : "fwd", copy.micro_batch);
  copy.flat = g.addCopyOf(bucket.param_flat, fmt::format("param.bucket{}.{}", copy.bucket, where), -1,
                          copy.micro_batch);
  for (int p : bucket.params) {
    const int param = g.params[size_t(p)].param;
    copy.views[param] =
        g.addCopyOf(param, fmt::format("{}.{}", g.tensor(param).name, where), copy.flat, copy.micro_batch);
  }
}

Node gatherInto(const Graph& g, const GatheredCopy& copy, int world, const std::string& group) {
  const BucketTensors& bucket = g.buckets[size_t(copy.bucket)];
  const Tensor& flat = g.tensor(copy.flat);
  Node n;
  n.op = OpKind::AllGather;
  n.name = fmt::format("comm.allgather.bucket{}.{}.mb{}", copy.bucket, copy.backward ? "bwd" : "fwd",
                       copy.micro_batch);
  n.phase = Phase::Comm;
  n.stream = StreamKind::Comm;
  n.micro_batch = copy.micro_batch;
  n.inputs = {bucket.param_shard};
  n.outputs = {copy.flat};
  n.attrs.elements = flat.elements();
  n.attrs.shards = world;
  n.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, flat.elements(), flat.dtype, group);
  return n;
}

}  // namespace

void applyParameterSharding(Graph& g, const JobSpec& job) {
  if (!shardsParameters(job)) return;
  const int world = shardCount(job);  // ranks each bucket is sharded over
  std::vector<int> bucket_of(g.tensors.size(), -1);
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    if (g.buckets[b].param_shard < 0 || g.buckets[b].param_flat < 0)
      throw std::logic_error(fmt::format("sharded parameters: bucket {} has no parameter shard", b));
    for (int p : g.buckets[b].params) bucket_of[size_t(g.params[size_t(p)].param)] = int(b);
  }

  // Every read of a parameter goes to the copy of its bucket for the
  // reading task's micro-batch and direction.
  std::map<CopyKey, GatheredCopy> copies;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k) {
      const int t = g.nodes[i].inputs[k];
      if (t < 0 || size_t(t) >= bucket_of.size() || bucket_of[size_t(t)] < 0) continue;
      const Node& n = g.nodes[i];
      if (!readsParameters(n.phase) || n.micro_batch < 0)
        throw std::logic_error(fmt::format("sharded parameters: {} ({}) reads parameter {} outside a micro-batch's "
                                           "forward or backward",
                                           n.name, toString(n.phase), g.tensor(t).name));
      const CopyKey key{bucket_of[size_t(t)], n.micro_batch, n.phase != Phase::Forward};
      auto [it, added] = copies.try_emplace(key);
      GatheredCopy& copy = it->second;
      if (added) {
        copy.bucket = std::get<0>(key);
        copy.micro_batch = std::get<1>(key);
        copy.backward = std::get<2>(key);
        if (copy.micro_batch == 0 && !copy.backward)
          copy.flat = g.buckets[size_t(copy.bucket)].param_flat;  // the parameters' own buffers
        else
          makeCopy(g, copy);
      }
      copy.first_use = std::min(copy.first_use, i);
      if (auto v = copy.views.find(t); v != copy.views.end()) g.nodes[i].inputs[k] = v->second;
    }
  }

  // Gather each copy where the compute stream reaches the first use of the
  // copy needed schedule.gather_ahead copies before it (by default the one
  // just before: one copy ahead).
  std::vector<const GatheredCopy*> order;
  for (const auto& [key, copy] : copies) order.push_back(&copy);
  std::stable_sort(order.begin(), order.end(), [](const GatheredCopy* a, const GatheredCopy* b) {
    return a->first_use < b->first_use;
  });
  std::vector<std::pair<size_t, Node>> inserts;  // (insert before node index, node)
  const size_t ahead = size_t(std::max(1, job.schedule.gather_ahead));
  for (size_t c = 0; c < order.size(); ++c)
    inserts.emplace_back(c < ahead ? 0 : order[c - ahead]->first_use, gatherInto(g, *order[c], world, shardGroup(job)));

  g.insertNodes(std::move(inserts), /*before=*/true);
}

}  // namespace tandem
