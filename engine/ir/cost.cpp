#include "engine/ir/cost.h"

#include <algorithm>

namespace tandem {
namespace {

int64_t bytesOf(const Graph& g, int t) { return g.tensor(t).bytes(); }

double opFlops(const Node& n) {
  const auto& a = n.attrs;
  const double mnk2 = 2.0 * double(a.m) * double(a.n) * double(a.k);
  switch (n.op) {
    case OpKind::Matmul: return mnk2 + (a.has_bias ? double(a.m) * a.n : 0);
    case OpKind::MatmulBwdData: return mnk2;
    case OpKind::MatmulBwdWeight: return mnk2 + (a.has_bias ? double(a.m) * a.n : 0);
    // Causal: half the t x t scores. With context parallelism each rank's
    // queries (t of them, two balanced chunks) meet a 1/cp share of the whole
    // sequence's (cp t)^2 / 2 pairs, cp times the pairs of t alone.
    // Materialized (OpAttrs::materialized): the two GEMMs over the whole
    // T x T (the mask is applied after Q K^T), four of them backward.
    case OpKind::Attention:
      if (a.materialized) return 4.0 * a.b * double(a.t) * a.t * a.c;
      return 2.0 * a.b * double(a.t) * a.t * a.c * std::max<int64_t>(1, a.context_parallel);
    // A bias gradient summed by the backward (engine/passes/bias_grad.h) adds
    // one addition per element of the gradient it sums.
    case OpKind::AttentionBwd:
      if (a.materialized) return 8.0 * a.b * double(a.t) * a.t * a.c + (a.bias_grad ? 3.0 * a.b * a.t * a.c : 0);
      return 5.0 * a.b * double(a.t) * a.t * a.c * std::max<int64_t>(1, a.context_parallel) +
             (a.bias_grad ? 3.0 * a.b * a.t * a.c : 0);
    case OpKind::PackKv: return 0;
    // The amax reduction and the scaled conversion.
    case OpKind::CastFp8: return 2.0 * a.elements;
    case OpKind::PackKvBwd: return double(a.elements);
    case OpKind::LayerNorm: return 8.0 * a.m * a.c;
    case OpKind::LayerNormBwd: return (a.bias_grad ? 15.0 : 14.0) * a.m * a.c;
    case OpKind::Gelu: return 10.0 * a.elements;
    case OpKind::GeluBwd: return 16.0 * a.elements;
    case OpKind::Add: return double(a.elements);
    // Vocabulary split (tensor_parallel): the statistics task did the
    // row's work; this one combines every rank's three numbers per token.
    case OpKind::CrossEntropy: return a.tensor_parallel > 1 ? 4.0 * a.m * a.tensor_parallel : 3.0 * a.m * double(a.v);
    case OpKind::CrossEntropyBwd: return 4.0 * a.m * double(a.v);
    case OpKind::Embedding: return double(a.b) * a.t * a.c;
    case OpKind::EmbeddingBwd: return 2.0 * a.b * a.t * a.c;
    case OpKind::AllReduce: return double(a.elements);
    case OpKind::ReduceScatter: return double(a.elements);
    case OpKind::AllGather: return 0;
    case OpKind::GradNorm: return 2.0 * a.elements;
    case OpKind::AdamW: return 12.0 * a.elements;
    case OpKind::LoadBatch: return 0;
    case OpKind::CrossEntropyStats: return 3.0 * a.m * double(a.v);
    case OpKind::Send: return 0;
    case OpKind::Recv: return 0;
    // Llama's: a sum of squares and a scale per element; the backward's two
    // passes. Grouped-query attention does the products of as many query
    // heads as multi-head attention (c is their width).
    case OpKind::RmsNorm: return 4.0 * a.m * a.c;
    case OpKind::RmsNormBwd: return 9.0 * a.m * a.c;
    case OpKind::SwiGlu: return 6.0 * a.elements;
    case OpKind::SwiGluBwd: return 12.0 * a.elements;
    case OpKind::SquaredRelu: return 2.0 * a.elements;
    case OpKind::SquaredReluBwd: return 3.0 * a.elements;
  }
  return 0;
}

}  // namespace

OpCost costOf(const Graph& g, const Node& n) {
  OpCost c;
  c.flops = opFlops(n);
  const auto& a = n.attrs;
  switch (n.op) {
    case OpKind::Embedding: {
      // Only the looked-up rows of wte and the first T rows of wpe are read.
      const int64_t rows = a.b * a.t, el = dtypeSize(g.tensor(n.inputs[1]).dtype);
      c.bytes_read = bytesOf(g, n.inputs[0]) + rows * a.c * el + a.t * a.c * el;
      c.bytes_written = bytesOf(g, n.outputs[0]);
      return c;
    }
    case OpKind::EmbeddingBwd: {
      // Gathered (engine/passes/embedding_gather.h): each rank applies the
      // rows of every rank that fall in its shard, about one rank's worth.
      const int64_t rows = a.b * a.t, el = dtypeSize(g.tensor(n.outputs[0]).dtype);
      const int64_t dy_bytes = bytesOf(g, n.inputs[0]) / std::max<int64_t>(1, a.shards);
      c.bytes_read = dy_bytes + bytesOf(g, n.inputs[1]) + 2 * rows * a.c * el;
      c.bytes_written = 2 * rows * a.c * el;
      return c;
    }
    case OpKind::CrossEntropy:
      if (a.tensor_parallel > 1) {  // reads the gathered statistics and the targets, not the logits
        c.bytes_read = bytesOf(g, n.inputs[1]) + bytesOf(g, n.inputs[2]);
        c.bytes_written = bytesOf(g, n.outputs[0]);
        return c;
      }
      break;
    default: break;
  }
  for (int t : n.inputs) c.bytes_read += bytesOf(g, t);
  for (int t : n.outputs) c.bytes_written += bytesOf(g, t);
  // Accumulating outputs are read as well as written.
  if (a.accumulate && !n.outputs.empty()) c.bytes_read += bytesOf(g, n.outputs[0]);
  if (a.accumulate_params)
    for (size_t i = 1; i < n.outputs.size(); ++i) c.bytes_read += bytesOf(g, n.outputs[i]);
  // Current scaling: the amax pass, then the cast (unless the input's writer took the amax).
  if (n.op == OpKind::CastFp8 && a.current_scaling && !a.amax_by_writer) c.bytes_read *= 2;
  if (a.materialized && (n.op == OpKind::Attention || n.op == OpKind::AttentionBwd)) {
    // The score matrices between the kernels (the probabilities, the
    // forward's output and the backward's input, are counted above):
    // forward, S written and read by the softmax, P read by P V; backward,
    // dP written, P and dP read and dS written by the softmax's backward, dS
    // read by both GEMMs.
    const int64_t pass = a.b * a.h * a.t * a.t * dtypeSize(g.tensor(n.op == OpKind::Attention ? n.outputs[1] : n.inputs[3]).dtype);
    c.bytes_written += (n.op == OpKind::Attention ? 1 : 2) * pass;
    c.bytes_read += (n.op == OpKind::Attention ? 2 : 4) * pass;
    if (a.dropout > 0) {
      // The dropout's pass (the dropped P and the mask are outputs or
      // inputs, counted above): forward, P read once more; backward, dP'
      // written by the GEMM and read by the dropout, which writes dP, while
      // dV's GEMM reads the dropped P (an input) instead of P once more.
      if (n.op == OpKind::Attention) c.bytes_read += pass;
      else c.bytes_written += pass;
    }
  }
  if (a.shards > 0 && (n.op == OpKind::AdamW || n.op == OpKind::GradNorm)) {
    // A sharded optimizer task touches its rank's part of each whole bucket
    // (gradients, parameters) and all of the shard-sized state.
    auto touched = [&](int t) {
      const bool whole_bucket = std::any_of(g.buckets.begin(), g.buckets.end(), [&](const BucketTensors& b) {
        return t == b.flat || t == b.param_flat;
      });
      return whole_bucket ? bytesOf(g, t) / a.shards : bytesOf(g, t);
    };
    c.bytes_read = c.bytes_written = 0;
    for (int t : n.inputs) c.bytes_read += touched(t);
    for (int t : n.outputs) c.bytes_written += touched(t);
  }
  if (n.op == OpKind::AllReduce || n.op == OpKind::ReduceScatter || n.op == OpKind::AllGather ||
      n.op == OpKind::CrossEntropyBwd) {
    // In place: the input is the output; count the buffer once each way.
    c.bytes_read = bytesOf(g, n.inputs[0]);
    if (n.op == OpKind::CrossEntropyBwd) c.bytes_read += bytesOf(g, n.inputs[1]);
    c.bytes_written = bytesOf(g, n.outputs[0]);
  }
  return c;
}

}  // namespace tandem
