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
// (cudaGraphNodeGetDependentNodes). The queries take the edges' data: a
// captured graph can hold programmatic edges (a launch that allowed
// programmatic dependent launch), and without the data the runtime refuses
// the query as lossy.
using EdgeQuery = cudaError_t (*)(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*, size_t*);
std::vector<cudaGraphNode_t> neighboursOf(cudaGraphNode_t node, EdgeQuery query,
                                          std::vector<cudaGraphEdgeData>* data = nullptr) {
  size_t n = 0;
  TANDEM_CUDA_CHECK(query(node, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> out(n);
  std::vector<cudaGraphEdgeData> edges(n);
  if (n) TANDEM_CUDA_CHECK(query(node, out.data(), edges.data(), &n));
  out.resize(n);
  edges.resize(n);
  if (data) *data = std::move(edges);
  return out;
}
std::vector<cudaGraphNode_t> dependenciesOf(cudaGraphNode_t node) {
  return neighboursOf(node, &cudaGraphNodeGetDependencies);
}
std::vector<cudaGraphNode_t> dependentsOf(cudaGraphNode_t node, std::vector<cudaGraphEdgeData>* data = nullptr) {
  return neighboursOf(node, &cudaGraphNodeGetDependentNodes, data);
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

MergedMemsets mergeZeroMemsetsInside(cudaGraph_t graph, const void* begin, const void* end) {
  const char* lo = static_cast<const char*>(begin);
  const char* hi = static_cast<const char*>(end);
  MergedMemsets out;
  std::vector<cudaGraphNode_t>& zeroing = out.merged;
  if (!lo || hi <= lo) return out;
  for (cudaGraphNode_t node : nodesOf(graph)) {
    cudaMemsetParams p{};
    if (isMemset(node) && memsetInside(node, lo, hi, p) && p.value == 0) zeroing.push_back(node);
  }
  if (zeroing.empty()) return out;
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
  out.whole = merged;
  return out;
}

int orderBeforeRoots(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& whole,
                     const std::vector<cudaGraphNode_t>& merged) {
  if (whole.empty()) return 0;
  auto detach = [&](cudaGraphNode_t node) {
    std::vector<cudaGraphEdgeData> data;
    const std::vector<cudaGraphNode_t> next = dependentsOf(node, &data);
    if (next.empty()) return;
    const std::vector<cudaGraphNode_t> self(next.size(), node);
    TANDEM_CUDA_CHECK(cudaGraphRemoveDependencies(graph, self.data(), next.data(), data.data(), next.size()));
  };
  for (cudaGraphNode_t node : merged) detach(node);
  for (cudaGraphNode_t node : whole) detach(node);
  auto among = [](const std::vector<cudaGraphNode_t>& set, cudaGraphNode_t node) {
    return std::find(set.begin(), set.end(), node) != set.end();
  };
  int roots = 0;
  for (cudaGraphNode_t node : nodesOf(graph)) {
    if (among(whole, node) || among(merged, node) || !dependenciesOf(node).empty()) continue;
    for (cudaGraphNode_t first : whole) TANDEM_CUDA_CHECK(cudaGraphAddDependencies(graph, &first, &node, nullptr, 1));
    ++roots;
  }
  return roots;
}

GraphEdges edgesOf(cudaGraph_t graph) {
  size_t n = 0;
  TANDEM_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n) TANDEM_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  GraphEdges out;
  auto kernelName = [](cudaGraphNode_t node) -> std::string {
    cudaGraphNodeType type{};
    TANDEM_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) return "node of type " + std::to_string(int(type));
    cudaKernelNodeParams p{};
    const char* name = nullptr;
    if (cudaGraphKernelNodeGetParams(node, &p) != cudaSuccess || cudaFuncGetName(&name, p.func) != cudaSuccess ||
        name == nullptr) {
      cudaGetLastError();  // a library's kernel may have no name to give
      return "kernel";
    }
    return name;
  };
  for (size_t i = 0; i < n; ++i) {
    const cudaGraphEdgeData& e = data[i];
    if (e.type == cudaGraphDependencyTypeDefault && e.from_port == cudaGraphKernelNodePortDefault) {
      ++out.full;
      continue;
    }
    ++out.other;
    if (out.examples.size() < 4)
      out.examples.push_back(kernelName(from[i]) + " -> " + kernelName(to[i]) + " (type " + std::to_string(e.type) +
                             ", port " + std::to_string(e.from_port) + ")");
  }
  return out;
}

void disableNodes(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes) {
  for (cudaGraphNode_t node : nodes) TANDEM_CUDA_CHECK(cudaGraphNodeSetEnabled(exec, node, 0));
}

}  // namespace tandem::cuda
