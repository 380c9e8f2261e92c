#include "engine/ir/graph.h"

#include <algorithm>

namespace tandem {

int64_t Tensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int Graph::addTensor(Tensor t) {
  t.id = static_cast<int>(tensors.size());
  tensors.push_back(std::move(t));
  return tensors.back().id;
}

int Graph::addCopyOf(int like, std::string name, int parent, int micro_batch) {
  Tensor t = tensor(like);
  t.name = std::move(name);
  t.persistent = false;
  t.requires_grad = false;
  t.parent = parent;
  t.parent_offset_bytes = parent >= 0 ? t.parent_offset_bytes : 0;
  t.micro_batch = micro_batch;
  return addTensor(std::move(t));
}

void Graph::insertNodes(std::vector<std::pair<size_t, Node>> inserts, bool before) {
  if (inserts.empty()) return;
  std::stable_sort(inserts.begin(), inserts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node> merged;
  merged.reserve(nodes.size() + inserts.size());
  size_t k = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (before)
      while (k < inserts.size() && inserts[k].first == i) merged.push_back(std::move(inserts[k++].second));
    merged.push_back(std::move(nodes[i]));
    if (!before)
      while (k < inserts.size() && inserts[k].first == i) merged.push_back(std::move(inserts[k++].second));
  }
  nodes = std::move(merged);
}

Node& Graph::addNode(Node n) {
  nodes.push_back(std::move(n));
  return nodes.back();
}

}  // namespace tandem
