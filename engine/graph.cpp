#include "engine/graph.h"

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

Node& Graph::addNode(Node n) {
  nodes.push_back(std::move(n));
  return nodes.back();
}

}  // namespace tandem
