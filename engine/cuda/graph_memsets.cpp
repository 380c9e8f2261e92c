#include "engine/cuda/graph_memsets.h"

#include <algorithm>
#include <vector>

#include "engine/cuda/check.h"

namespace tandem::cuda {
namespace {

std::vector<cudaGraphNode_t> nodesOf(cudaGraph_t graph) {
  size_t n = 0;
  TANDEM_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) TANDEM_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  nodes.resize(n);
  return nodes;
}

// A node's predecessors (cudaGraphNodeGetDependencies) or successors
// (cudaGraphNodeGetDependentNodes). Captured edges carry default edge data,
// so the queries pass none.
using EdgeQuery = cudaError_t (*)(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*, size_t*);
std::vector<cudaGraphNode_t> neighboursOf(cudaGraphNode_t node, EdgeQuery query) {
  size_t n = 0;
  TANDEM_CUDA_CHECK(query(node, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> out(n);
  if (n) TANDEM_CUDA_CHECK(query(node, out.data(), nullptr, &n));
  out.resize(n);
  return out;
}
std::vector<cudaGraphNode_t> dependenciesOf(cudaGraphNode_t node) {
  return neighboursOf(node, &cudaGraphNodeGetDependencies);
}
std::vector<cudaGraphNode_t> dependentsOf(cudaGraphNode_t node) {
  return neighboursOf(node, &cudaGraphNodeGetDependentNodes);
}

bool isMemset(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  TANDEM_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
  return type == cudaGraphNodeTypeMemset;
}

}  // namespace

int memsetNodesOf(cudaGraph_t graph) {
  int n = 0;
  for (cudaGraphNode_t node : nodesOf(graph)) n += isMemset(node);
  return n;
}

namespace {

// Whether the memset node writes only inside [lo, hi); its parameters in `p`.
bool memsetInside(cudaGraphNode_t node, const char* lo, const char* hi, cudaMemsetParams& p) {
  TANDEM_CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &p));
  const size_t row = p.elementSize * p.width;
  const size_t extent = p.height > 1 ? p.pitch * (p.height - 1) + row : row;
  const char* dst = static_cast<const char*>(p.dst);
  return dst >= lo && dst + extent <= hi;
}

// Makes `node` a root of the graph: each of its dependents gets the node's
// predecessors as its own, so the order of everything else stays, and the
// node loses its incoming edges. False when it was a root already.
bool hoist(cudaGraph_t graph, cudaGraphNode_t node) {
  const std::vector<cudaGraphNode_t> preds = dependenciesOf(node);
  if (preds.empty()) return false;
  for (cudaGraphNode_t next : dependentsOf(node)) {
    const std::vector<cudaGraphNode_t> has = dependenciesOf(next);
    for (cudaGraphNode_t pred : preds) {
      if (std::find(has.begin(), has.end(), pred) != has.end()) continue;
      TANDEM_CUDA_CHECK(cudaGraphAddDependencies(graph, &pred, &next, nullptr, 1));
    }
  }
  const std::vector<cudaGraphNode_t> self(preds.size(), node);
  TANDEM_CUDA_CHECK(cudaGraphRemoveDependencies(graph, preds.data(), self.data(), nullptr, preds.size()));
  return true;
}

}  // namespace

int hoistMemsetsInside(cudaGraph_t graph, const void* begin, const void* end) {
  const char* lo = static_cast<const char*>(begin);
  const char* hi = static_cast<const char*>(end);
  if (!lo || hi <= lo) return 0;
  int moved = 0;
  for (cudaGraphNode_t node : nodesOf(graph)) {
    cudaMemsetParams p{};
    if (isMemset(node) && memsetInside(node, lo, hi, p) && hoist(graph, node)) ++moved;
  }
  return moved;
}

std::vector<cudaGraphNode_t> mergeZeroMemsetsInside(cudaGraph_t graph, const void* begin, const void* end) {
  const char* lo = static_cast<const char*>(begin);
  const char* hi = static_cast<const char*>(end);
  std::vector<cudaGraphNode_t> zeroing;
  if (!lo || hi <= lo) return zeroing;
  for (cudaGraphNode_t node : nodesOf(graph)) {
    cudaMemsetParams p{};
    if (isMemset(node) && memsetInside(node, lo, hi, p) && p.value == 0) zeroing.push_back(node);
  }
  if (zeroing.empty()) return zeroing;
  const size_t bytes = size_t(hi - lo);
  cudaMemsetParams whole{};
  whole.dst = const_cast<char*>(lo);
  whole.value = 0;
  whole.elementSize = (reinterpret_cast<uintptr_t>(lo) % 4 == 0 && bytes % 4 == 0) ? 4 : 1;
  whole.width = bytes / whole.elementSize;
  whole.height = 1;
  cudaGraphNode_t merged = nullptr;
  TANDEM_CUDA_CHECK(cudaGraphAddMemsetNode(&merged, graph, nullptr, 0, &whole));
  for (cudaGraphNode_t node : zeroing) {
    hoist(graph, node);
    for (cudaGraphNode_t next : dependentsOf(node)) {
      const std::vector<cudaGraphNode_t> has = dependenciesOf(next);
      if (std::find(has.begin(), has.end(), merged) == has.end())
        TANDEM_CUDA_CHECK(cudaGraphAddDependencies(graph, &merged, &next, nullptr, 1));
    }
  }
  return zeroing;
}

void disableNodes(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes) {
  for (cudaGraphNode_t node : nodes) TANDEM_CUDA_CHECK(cudaGraphNodeSetEnabled(exec, node, 0));
}

}  // namespace tandem::cuda
