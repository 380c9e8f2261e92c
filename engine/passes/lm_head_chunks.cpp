#include "engine/passes/lm_head_chunks.h"

#include <fmt/format.h>

#include <stdexcept>

namespace tandem {
namespace {

bool readsOrWrites(const Node& n, int tensor) {
  for (int t : n.inputs)
    if (t == tensor) return true;
  for (int t : n.outputs)
    if (t == tensor) return true;
  return false;
}

// Whether node i starts the five nodes autodiff emits for `logits = x W^T`
// followed by the cross-entropy: the matmul, the cross-entropy, its
// backward, the data and the weight gradient, in this order. Nothing after
// them may touch the logits (they become per-group tensors).
bool lmHeadStartsAt(const Graph& g, size_t i) {
  if (i + 4 >= g.nodes.size()) return false;
  const Node& mm = g.nodes[i];
  if (mm.op != OpKind::Matmul || mm.phase != Phase::Forward || mm.attrs.has_bias || mm.inputs.size() != 2 ||
      mm.outputs.size() != 1)
    return false;
  const int logits = mm.outputs[0], x = mm.inputs[0], w = mm.inputs[1];
  const Node& ce = g.nodes[i + 1];
  const Node& ce_bwd = g.nodes[i + 2];
  const Node& dx = g.nodes[i + 3];
  const Node& dw = g.nodes[i + 4];
  if (ce.op != OpKind::CrossEntropy || ce.inputs.size() != 2 || ce.inputs[0] != logits || ce.outputs.size() != 1)
    return false;
  if (ce_bwd.op != OpKind::CrossEntropyBwd || ce_bwd.inputs != std::vector<int>{logits, ce.inputs[1]} ||
      ce_bwd.outputs != std::vector<int>{logits})
    return false;
  if (dx.op != OpKind::MatmulBwdData || dx.inputs != std::vector<int>{logits, w} || dx.outputs.size() != 1)
    return false;
  if (dw.op != OpKind::MatmulBwdWeight || dw.inputs != std::vector<int>{logits, x} || dw.outputs.size() != 1)
    return false;
  for (size_t j = i + 5; j < g.nodes.size(); ++j)
    if (readsOrWrites(g.nodes[j], logits)) return false;
  return true;
}

// "lm_head.fwd.mb0" -> "lm_head.chunk2.fwd.mb0": the group goes before the
// node's last two name parts (what it does and its micro-batch).
std::string nodeName(const std::string& name, int chunk) {
  const size_t last = name.rfind('.');
  const size_t what = last == std::string::npos || last == 0 ? std::string::npos : name.rfind('.', last - 1);
  if (what == std::string::npos) return fmt::format("{}.chunk{}", name, chunk);
  return fmt::format("{}.chunk{}{}", name.substr(0, what), chunk, name.substr(what));
}

// "lm_head.logits.mb0" -> "lm_head.logits.chunk2.mb0".
std::string tensorName(const std::string& name, int chunk) {
  const size_t mb = name.rfind(".mb");
  if (mb == std::string::npos) return fmt::format("{}.chunk{}", name, chunk);
  return fmt::format("{}.chunk{}{}", name.substr(0, mb), chunk, name.substr(mb));
}

// Rows [row0, row0 + rows) of a tensor whose elements are `total_rows`
// rows, as a view of the tensor's root.
int rowView(Graph& g, int tensor, int64_t total_rows, int64_t row0, int64_t rows, int chunk) {
  const Tensor src = g.tensor(tensor);  // a copy: addTensor may move the tensors
  const int64_t per_row = src.elements() / total_rows;
  if (per_row * total_rows != src.elements())
    throw std::logic_error(fmt::format("lm head chunks: {} is not {} rows", src.name, total_rows));
  Tensor v;
  v.name = tensorName(src.name, chunk);
  v.dtype = src.dtype;
  v.shape = per_row == 1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, per_row};
  v.category = src.category;
  v.layer = src.layer;
  v.micro_batch = src.micro_batch;
  v.role = src.role;
  v.persistent = src.persistent;
  v.parent = src.parent >= 0 ? src.parent : tensor;
  v.parent_offset_bytes = (src.parent >= 0 ? src.parent_offset_bytes : 0) + row0 * per_row * dtypeSize(src.dtype);
  return g.addTensor(std::move(v));
}

// Appends the K groups that replace the five nodes from node `first` to `out`.
void splitLmHead(Graph& g, size_t first, int chunks, std::vector<Node>& out) {
  const Node mm = g.nodes[first], ce = g.nodes[first + 1], ce_bwd = g.nodes[first + 2], dx = g.nodes[first + 3],
             dw = g.nodes[first + 4];
  const int64_t tokens = mm.attrs.m;
  if (tokens % chunks != 0 || (tokens / chunks) % 8 != 0)
    throw std::invalid_argument(fmt::format(
        "schedule.lm_head_chunks {} does not split the {} tokens of {} into equal groups of a multiple of 8", chunks,
        tokens, mm.name));
  const int64_t rows = tokens / chunks;
  const int logits = mm.outputs[0], x = mm.inputs[0], w = mm.inputs[1];
  const int targets = ce.inputs[1], losses = ce.outputs[0], dx_out = dx.outputs[0];
  const Tensor logits_tensor = g.tensor(logits);
  auto group = [&](const Node& original, int c, std::vector<int> in, std::vector<int> outs) {
    Node n = original;
    n.name = nodeName(original.name, c);
    n.inputs = std::move(in);
    n.outputs = std::move(outs);
    n.attrs.m = rows;
    out.push_back(std::move(n));
    return &out.back();
  };
  for (int c = 0; c < chunks; ++c) {
    const int64_t row0 = int64_t(c) * rows;
    // Group 0 keeps the original logits tensor (no buffer is left unused).
    int group_logits = logits;
    if (c == 0) {
      Tensor& first = g.tensor(logits);
      first.name = tensorName(logits_tensor.name, 0);
      first.shape = {rows, logits_tensor.elements() / tokens};
    } else {
      Tensor t = logits_tensor;
      t.name = tensorName(logits_tensor.name, c);
      t.shape = {rows, logits_tensor.elements() / tokens};
      group_logits = g.addTensor(std::move(t));
    }
    const int xc = rowView(g, x, tokens, row0, rows, c);
    const int targets_c = rowView(g, targets, tokens, row0, rows, c);
    const int losses_c = rowView(g, losses, tokens, row0, rows, c);
    const int dx_c = rowView(g, dx_out, tokens, row0, rows, c);
    group(mm, c, {xc, w}, {group_logits});
    group(ce, c, {group_logits, targets_c}, {losses_c});
    group(ce_bwd, c, {group_logits, targets_c}, {group_logits});
    group(dx, c, {group_logits, w}, {dx_c});
    // The weight gradient is the sum of the groups' products.
    Node* weight = group(dw, c, {group_logits, xc}, dw.outputs);
    if (c > 0) weight->attrs.accumulate_params = true;
  }
}

}  // namespace

int applyLmHeadChunks(Graph& g, const JobSpec& job) {
  const int chunks = job.schedule.lm_head_chunks;
  if (chunks <= 1) return 0;
  std::vector<Node> out;
  out.reserve(g.nodes.size() + 8 * size_t(chunks));
  int split = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (lmHeadStartsAt(g, i)) {
      splitLmHead(g, i, chunks, out);
      ++split;
      i += 4;
      continue;
    }
    out.push_back(g.nodes[i]);
  }
  g.nodes = std::move(out);
  return split;
}

}  // namespace tandem
