#include "engine/pass_tensor_parallel.h"

#include <fmt/format.h>

#include <stdexcept>
#include <unordered_set>

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
    const int dx = bwd.outputs.at(0);
    const Tensor& t = g.tensor(dx);
    Node n;
    n.op = OpKind::AllReduce;
    n.name = fmt::format("{}.allreduce.mb{}", bwd.name.substr(0, bwd.name.rfind(".mb")), bwd.micro_batch);
    n.phase = bwd.phase;
    n.layer = bwd.layer;
    n.micro_batch = bwd.micro_batch;
    n.inputs = {dx};
    n.outputs = {dx};
    n.attrs.elements = t.elements();
    n.collective = tensorParallelCollective(t.elements(), t.dtype);
    inserts.emplace_back(i, std::move(n));
  }
  g.insertNodes(std::move(inserts));
}

}  // namespace tandem
