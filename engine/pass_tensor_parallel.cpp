#include "engine/pass_tensor_parallel.h"

#include <fmt/format.h>

#include <stdexcept>
#include <unordered_set>

#include "engine/pass_buckets.h"

namespace tandem {

CollectiveInfo tensorParallelCollective(int64_t count, DType dt) {
  CollectiveInfo info;
  info.op = CollectiveOp::AllReduce;
  info.reduce = ReduceOp::Sum;
  info.group = "tp";
  info.count = count;
  info.dtype = dt;
  info.bytes = count * dtypeSize(dt);
  return info;
}

void applyTensorParallelBackward(Graph& g, const JobSpec& job) {
  if (job.parallel.tensor_parallel <= 1) return;
  std::unordered_set<int> column_parallel;  // weights split by rows
  for (const ParamTensors& p : g.params)
    if (p.split_dim == 0 && g.tensor(p.param).shape.size() == 2) column_parallel.insert(p.param);
  std::vector<std::pair<size_t, Node>> inserts;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bwd = g.nodes[i];
    if (bwd.op != OpKind::MatmulBwdData || !column_parallel.count(bwd.inputs.at(1))) continue;
    // The input of a column-parallel layer is a LayerNorm's output, read by
    // this layer alone: its gradient is written once, here, and must be the
    // group's sum before the LayerNorm's backward reads it.
    if (bwd.attrs.accumulate)
      throw std::logic_error(bwd.name + ": a column-parallel layer's input gradient has other contributions");
    Node n = inPlaceAllReduce(g, bwd.outputs.at(0),
                              fmt::format("{}.allreduce.mb{}", bwd.name.substr(0, bwd.name.rfind(".mb")),
                                          bwd.micro_batch),
                              ReduceOp::Sum, "tp", bwd.phase, StreamKind::Compute, bwd.micro_batch);
    n.layer = bwd.layer;
    inserts.emplace_back(i, std::move(n));
  }
  g.insertNodes(std::move(inserts));
}

}  // namespace tandem
