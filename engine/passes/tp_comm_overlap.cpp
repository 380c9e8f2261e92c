#include "engine/passes/tp_comm_overlap.h"

#include <algorithm>

namespace tandem {
namespace {

bool isGemm(OpKind op) { return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight; }

bool sequenceTransition(const Node& n) {
  return n.collective && n.collective->group == "tp" &&
         (n.op == OpKind::AllGather || n.op == OpKind::ReduceScatter) && !n.inputs.empty() && !n.outputs.empty() &&
         n.inputs[0] != n.outputs[0];
}

bool reads(const Node& n, int t) { return std::find(n.inputs.begin(), n.inputs.end(), t) != n.inputs.end(); }
bool writes(const Node& n, int t) { return std::find(n.outputs.begin(), n.outputs.end(), t) != n.outputs.end(); }

}  // namespace

int applyTpCommOverlap(Graph& g, const JobSpec& job) {
  if (!job.schedule.tp_comm_overlap || job.parallel.tensor_parallel <= 1) return 0;
  int overlapped = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if (!sequenceTransition(c)) continue;
    int partner = -1;
    if (c.op == OpKind::AllGather) {
      // The first reader of the gathered rows.
      for (size_t j = i + 1; j < g.nodes.size() && partner < 0; ++j)
        if (reads(g.nodes[j], c.outputs[0])) partner = int(j);
    } else {
      // The last writer of the partial sums.
      for (size_t j = i; j-- > 0 && partner < 0;)
        if (writes(g.nodes[j], c.inputs[0])) partner = int(j);
    }
    if (partner < 0 || !isGemm(g.nodes[size_t(partner)].op)) continue;
    c.attrs.overlapped = true;
    c.stream = StreamKind::Comm;
    c.stream_name = "comm.tp";
    if (c.op == OpKind::ReduceScatter)
      for (int in : g.nodes[size_t(partner)].inputs)
        if (!reads(c, in)) c.inputs.push_back(in);  // starts with the GEMM, not before its inputs
    ++overlapped;
  }
  return overlapped;
}

}  // namespace tandem
