#include "engine/passes/pipeline_scatter_gather.h"

#include <fmt/format.h>

#include <vector>

#include "engine/passes/buckets.h"

namespace tandem {
namespace {

bool stageTransfer(const Node& n) {
  return (n.op == OpKind::Send || n.op == OpKind::Recv) && n.collective && n.collective->group.rfind("pp", 0) == 0;
}

}  // namespace

int applyPipelineScatterGather(Graph& g, const JobSpec& job) {
  const int tp = job.parallel.tensor_parallel;
  if (!job.comm.pipeline_scatter_gather || tp < 2 || job.parallel.sequence_parallel) return 0;
  std::vector<Node> out;
  out.reserve(g.nodes.size() + g.nodes.size() / 8);
  int split = 0;
  for (Node& n : g.nodes) {
    if (!stageTransfer(n)) {
      out.push_back(std::move(n));
      continue;
    }
    const int tensor = n.op == OpKind::Send ? n.inputs.at(0) : n.outputs.at(0);
    const Tensor& t = g.tensor(tensor);
    if (t.elements() % tp != 0)
      throw std::logic_error(fmt::format("{}: {} elements do not split over {} ranks", n.name, t.elements(), tp));
    n.attrs.shards = tp;
    n.collective->count = t.elements() / tp;
    n.collective->bytes = n.collective->count * dtypeSize(t.dtype);
    ++split;
    const bool recv = n.op == OpKind::Recv;
    Node gather;
    if (recv) {
      gather.op = OpKind::AllGather;
      gather.name = n.name + ".gather";
      gather.phase = Phase::Comm;
      gather.layer = n.layer;
      gather.micro_batch = n.micro_batch;
      gather.inputs = gather.outputs = {tensor};
      gather.attrs.elements = t.elements();
      gather.attrs.shards = tp;
      gather.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, t.elements(), t.dtype, "tp");
      gather.stream = StreamKind::Compute;  // Megatron gathers on the default stream before the first use
    }
    out.push_back(std::move(n));
    if (recv) out.push_back(std::move(gather));
  }
  g.nodes = std::move(out);
  return split;
}

}  // namespace tandem
