#include "engine/passes/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "engine/passes/buckets.h"

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
  // With sequence parallelism the reduce-scatter that is the backward of
  // each column-parallel layer's all-gathered input sums these instead.
  if (job.parallel.tensor_parallel <= 1 || job.parallel.sequence_parallel) return;
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

void applySequenceParallelGradientSum(Graph& g, const JobSpec& job) {
  if (job.parallel.tensor_parallel <= 1 || !job.parallel.sequence_parallel) return;
  std::vector<bool> is_param_grad(g.tensors.size(), false);
  for (const ParamTensors& p : g.params) is_param_grad.at(size_t(p.grad)) = true;
  // Every parameter gradient a norm's backward writes (a LayerNorm's weight
  // and bias, and a fused linear bias gradient; an RMSNorm's weight) sums
  // over the rank's tokens
  // alone. Each is summed over the group once its value is complete: at
  // the last write before one that overwrites it (gradients restarted per
  // micro-batch) or the step's last.
  std::vector<int> last_writer(g.tensors.size(), -1);
  std::vector<std::pair<size_t, int>> complete;  // (node index, gradient tensor)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t o = 1; o < n.outputs.size(); ++o) {  // outputs[0] is the data gradient
      const int t = n.outputs[o];
      const bool norm = n.op == OpKind::LayerNormBwd || n.op == OpKind::RmsNormBwd;
      if (!norm || !is_param_grad.at(size_t(t))) continue;
      if (last_writer[size_t(t)] >= 0 && !n.attrs.accumulate_params)
        complete.emplace_back(size_t(last_writer[size_t(t)]), t);
      last_writer[size_t(t)] = int(i);
    }
  }
  for (size_t t = 0; t < last_writer.size(); ++t)
    if (last_writer[t] >= 0) complete.emplace_back(size_t(last_writer[t]), int(t));
  std::stable_sort(complete.begin(), complete.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<size_t, Node>> inserts;
  for (const auto& [at, t] : complete) {
    const Node& writer = g.nodes[at];
    // On the communication stream: nothing in the backward reads these
    // gradients, only the reductions and the optimizer after it.
    Node n = inPlaceAllReduce(g, t,
                              fmt::format("comm.allreduce.sequence.{}.mb{}", g.tensor(t).name, writer.micro_batch),
                              ReduceOp::Sum, "tp", Phase::Comm, StreamKind::Comm, writer.micro_batch);
    n.layer = writer.layer;
    inserts.emplace_back(at, std::move(n));
  }
  g.insertNodes(std::move(inserts));
}

}  // namespace tandem
