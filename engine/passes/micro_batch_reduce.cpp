#include "engine/passes/micro_batch_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "engine/passes/buckets.h"

namespace tandem {
namespace {

Node reduceScatterInto(const Graph& g, int bucket, int flat, int shard, int micro_batch, int world,
                       const std::string& group) {
  const Tensor& f = g.tensor(flat);
  Node n;
  n.op = OpKind::ReduceScatter;
  n.name = fmt::format("comm.reducescatter.bucket{}.mb{}", bucket, micro_batch);
  n.phase = Phase::Comm;
  n.stream = StreamKind::Comm;
  n.micro_batch = micro_batch;
  n.inputs = {flat};
  n.outputs = {shard};
  n.attrs.elements = f.elements();
  n.attrs.shards = world;
  n.collective = dataParallelCollective(CollectiveOp::ReduceScatter, ReduceOp::Avg, f.elements(), f.dtype, group);
  return n;
}

}  // namespace

bool reducesEveryMicroBatch(const JobSpec& job) {
  return job.comm.reduce_every_micro_batch && shardsGradients(job) && job.training.grad_accum > 1;
}

void applyMicroBatchReduce(Graph& g, const JobSpec& job) {
  if (!reducesEveryMicroBatch(job)) return;
  const int world = shardCount(job);  // ranks each bucket is sharded over
  const int accum = job.training.grad_accum;

  // The planned reduce-scatters of the buckets (one each, after the last
  // micro-batch) are replaced.
  auto bucketScatter = [&](const Node& n) {
    return n.op == OpKind::ReduceScatter &&
           std::any_of(g.buckets.begin(), g.buckets.end(), [&](const BucketTensors& b) { return n.inputs[0] == b.flat; });
  };
  g.nodes.erase(std::remove_if(g.nodes.begin(), g.nodes.end(), bucketScatter), g.nodes.end());

  // Each micro-batch m > 0 writes a copy of every bucket: its flat tensor
  // and a view per gradient at the same offset.
  std::map<int, int> bucket_of_view;  // gradient view (micro-batch 0's) -> bucket
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    if (g.buckets[b].grad_shard < 0)
      throw std::logic_error(fmt::format("reduce every micro-batch: bucket {} has no gradient shard", b));
    for (int p : g.buckets[b].params) bucket_of_view[g.params[size_t(p)].grad] = int(b);
  }
  // copies[m][tensor] for m >= 1: micro-batch m's flat tensor or view.
  std::vector<std::map<int, int>> copies(static_cast<size_t>(accum));
  std::vector<std::vector<int>> flat_of(g.buckets.size(), std::vector<int>(size_t(accum), -1));
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    const int flat = g.buckets[b].flat;
    flat_of[b][0] = flat;
    for (int m = 1; m < accum; ++m) {
      const int copy = g.addCopyOf(flat, fmt::format("{}.mb{}", g.tensor(flat).name, m), -1, m);
      flat_of[b][size_t(m)] = copy;
      copies[size_t(m)][flat] = copy;
      for (int p : g.buckets[b].params) {
        const int view = g.params[size_t(p)].grad;
        copies[size_t(m)][view] = g.addCopyOf(view, fmt::format("{}.mb{}", g.tensor(view).name, m), copy, m);
      }
    }
  }

  // Tasks of micro-batch m write (and, accumulating, read) its copies; the
  // last task of each micro-batch that writes into a bucket completes it.
  std::vector<std::vector<size_t>> completes(g.buckets.size(), std::vector<size_t>(size_t(accum), 0));
  std::vector<std::vector<bool>> written(g.buckets.size(), std::vector<bool>(size_t(accum), false));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.micro_batch < 0 || n.micro_batch >= accum) continue;
    const int m = n.micro_batch;
    for (int& t : n.outputs) {
      const auto it = bucket_of_view.find(t);
      if (it == bucket_of_view.end()) continue;
      completes[size_t(it->second)][size_t(m)] = i;
      written[size_t(it->second)][size_t(m)] = true;
      if (m > 0) t = copies[size_t(m)].at(t);
    }
    if (m > 0)
      for (int& t : n.inputs)
        if (auto c = copies[size_t(m)].find(t); c != copies[size_t(m)].end()) t = c->second;
  }

  // A reduce-scatter after each micro-batch completes each bucket; from
  // micro-batch 1 on into a shard of its own, added to the bucket's shard
  // where the next micro-batch completes the bucket (its reduce-scatter
  // long done by then), the last micro-batch's once the backward is done:
  // at most two shards of a bucket live at once whatever the micro-batches
  // (added at the end, every micro-batch's shard lived to the end of the
  // backward: GPT-2 124M over 8 ranks, 48 micro-batches, 1.46 GiB of
  // shards where FSDP holds one).
  std::vector<std::pair<size_t, Node>> inserts;  // (insert after node index, node)
  std::vector<Node> sums;
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    const int shard = g.buckets[b].grad_shard;
    for (int m = 0; m < accum; ++m) {
      if (!written[b][size_t(m)])
        throw std::logic_error(fmt::format("reduce every micro-batch: micro-batch {} writes no gradient of bucket {}",
                                           m, b));
      int target = shard;
      if (m > 0) {
        target = g.addCopyOf(shard, fmt::format("{}.mb{}", g.tensor(shard).name, m), -1, m);
        Node add;
        add.op = OpKind::Add;
        add.inputs = {shard, target};
        add.outputs = {shard};
        add.attrs.elements = g.tensor(shard).elements();
        if (m + 1 < accum) {
          add.name = fmt::format("sum_gradient_shards.bucket{}.mb{}", b, m);
          add.phase = Phase::Backward;
          add.micro_batch = m + 1;
          inserts.emplace_back(completes[b][size_t(m + 1)], std::move(add));
        } else {
          add.name = fmt::format("optimizer.sum_gradient_shards.bucket{}.mb{}", b, m);
          add.phase = Phase::Optimizer;  // a kernel readying the gradients for AdamW
          add.micro_batch = m;
          sums.push_back(std::move(add));
        }
      }
      inserts.emplace_back(completes[b][size_t(m)], reduceScatterInto(g, int(b), flat_of[b][size_t(m)], target, m, world,
                                                                        shardGroup(job)));
    }
  }
  g.insertNodes(std::move(inserts));
  for (Node& s : sums) g.nodes.push_back(std::move(s));
}

}  // namespace tandem
