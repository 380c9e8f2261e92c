#include "engine/ir/autodiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace tandem {

GradientState::GradientState(const Graph& g) {
  ensureSize(g);
  param_grad_.assign(g.tensors.size(), -1);
  param_written_.assign(g.tensors.size(), 0);
  for (const auto& p : g.params) param_grad_[p.param] = p.grad;
}

void GradientState::ensureSize(const Graph& g) {
  if (grad_.size() < g.tensors.size()) grad_.resize(g.tensors.size(), -1);
}

int GradientState::gradOf(int t) const {
  if (t < int(param_grad_.size()) && param_grad_[t] >= 0)
    return param_written_[t] ? param_grad_[t] : -1;
  return t < int(grad_.size()) ? grad_[t] : -1;
}

void GradientState::restartParameterGradients() { std::fill(param_written_.begin(), param_written_.end(), 0); }

void GradientState::alias(int t, int grad) {
  if (grad_.size() <= size_t(t)) grad_.resize(t + 1, -1);
  if (grad_[t] >= 0) throw std::logic_error("autodiff: aliasing a gradient that already exists");
  grad_[t] = grad;
}

int GradientState::contributionTarget(Graph& g, int t, bool& accumulate) {
  if (t < int(param_grad_.size()) && param_grad_[t] >= 0) {
    accumulate = param_written_[t] != 0;
    param_written_[t] = 1;
    return param_grad_[t];
  }
  ensureSize(g);
  if (grad_[t] >= 0) {
    accumulate = true;
    return grad_[t];
  }
  const Tensor& src = g.tensor(t);
  Tensor gt;
  gt.name = src.name + ".grad";
  gt.dtype = src.dtype;
  gt.shape = src.shape;
  gt.category = TensorCategory::Activation;
  gt.layer = src.layer;
  gt.micro_batch = src.micro_batch;
  gt.role = src.role + ".grad";
  int id = g.addTensor(std::move(gt));
  ensureSize(g);
  grad_[t] = id;
  accumulate = false;
  return id;
}

namespace {

bool requiresGrad(const Graph& g, int t) { return g.tensor(t).requires_grad; }

std::string baseName(const std::string& fwd_name) {
  auto pos = fwd_name.rfind(".fwd.");
  return pos == std::string::npos ? fwd_name : fwd_name.substr(0, pos);
}

class BackwardEmitter {
 public:
  BackwardEmitter(Graph& g, GradientState& grads) : g_(g), grads_(grads) {}

  Node& emit(const Node& fwd, OpKind op, const std::string& what, std::vector<int> in,
             std::vector<int> out) {
    Node n;
    n.op = op;
    n.name = fmt::format("{}.{}.mb{}", baseName(fwd.name), what, fwd.micro_batch);
    n.phase = Phase::Backward;
    n.layer = fwd.layer;
    n.micro_batch = fwd.micro_batch;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attrs = fwd.attrs;
    n.attrs.accumulate = false;
    n.attrs.accumulate_params = false;
    return g_.addNode(std::move(n));
  }

  void matmul(const Node& fwd, int dy) {
    const int x = fwd.inputs[0], w = fwd.inputs[1];
    if (requiresGrad(g_, x)) {
      bool acc = false;
      int dx = grads_.contributionTarget(g_, x, acc);
      emit(fwd, OpKind::MatmulBwdData, "bwd_data", {dy, w}, {dx}).attrs.accumulate = acc;
    }
    bool acc_w = false;
    std::vector<int> outs{grads_.contributionTarget(g_, w, acc_w)};
    if (fwd.attrs.has_bias) {
      bool acc_b = false;
      outs.push_back(grads_.contributionTarget(g_, fwd.inputs[2], acc_b));
      if (acc_b != acc_w) throw std::logic_error("autodiff: weight and bias gradients out of step");
    }
    emit(fwd, OpKind::MatmulBwdWeight, "bwd_weight", {dy, x}, outs).attrs.accumulate_params = acc_w;
  }

  void layerNorm(const Node& fwd, int dy) {
    const int x = fwd.inputs[0], w = fwd.inputs[1], b = fwd.inputs[2];
    bool acc_dx = false, acc_w = false, acc_b = false;
    int dx = grads_.contributionTarget(g_, x, acc_dx);
    int dw = grads_.contributionTarget(g_, w, acc_w);
    int db = grads_.contributionTarget(g_, b, acc_b);
    Node& n = emit(fwd, OpKind::LayerNormBwd, "bwd",
                   {dy, x, w, fwd.outputs[1], fwd.outputs[2]}, {dx, dw, db});
    n.attrs.accumulate = acc_dx;
    n.attrs.accumulate_params = acc_w;
  }

  void rmsNorm(const Node& fwd, int dy) {
    const int x = fwd.inputs[0], w = fwd.inputs[1];
    bool acc_dx = false, acc_w = false;
    int dx = grads_.contributionTarget(g_, x, acc_dx);
    int dw = grads_.contributionTarget(g_, w, acc_w);
    Node& n = emit(fwd, OpKind::RmsNormBwd, "bwd", {dy, x, w, fwd.outputs[1]}, {dx, dw});
    n.attrs.accumulate = acc_dx;
    n.attrs.accumulate_params = acc_w;
  }

  void swiGlu(const Node& fwd, int dy) {
    bool acc = false;
    int dx = grads_.contributionTarget(g_, fwd.inputs[0], acc);
    emit(fwd, OpKind::SwiGluBwd, "bwd", {dy, fwd.inputs[0]}, {dx}).attrs.accumulate = acc;
  }

  // With context parallelism the attention also reads the gathered keys
  // and values (its second input) and writes their gradient.
  void attention(const Node& fwd, int dy) {
    bool acc = false;
    std::vector<int> in{dy, fwd.inputs[0], fwd.outputs[0], fwd.outputs[1]};
    // With dropout (materialized): the dropped probabilities and the mask.
    for (size_t i = 2; i < fwd.outputs.size(); ++i) in.push_back(fwd.outputs[i]);
    std::vector<int> out{grads_.contributionTarget(g_, fwd.inputs[0], acc)};
    if (fwd.inputs.size() > 1) {
      bool acc_kv = false;
      in.push_back(fwd.inputs[1]);
      out.push_back(grads_.contributionTarget(g_, fwd.inputs[1], acc_kv));
      if (acc_kv) throw std::logic_error(fwd.name + ": the gathered keys and values have other readers");
    }
    emit(fwd, OpKind::AttentionBwd, "bwd", std::move(in), std::move(out)).attrs.accumulate = acc;
  }

  // The keys and values packed for the gather: their gradient adds into
  // qkv's key and value columns.
  void packKv(const Node& fwd, int dy) {
    bool acc = false;
    int dqkv = grads_.contributionTarget(g_, fwd.inputs[0], acc);
    emit(fwd, OpKind::PackKvBwd, "bwd", {dy}, {dqkv}).attrs.accumulate = acc;
  }

  void squaredRelu(const Node& fwd, int dy) {
    bool acc = false;
    int dx = grads_.contributionTarget(g_, fwd.inputs[0], acc);
    emit(fwd, OpKind::SquaredReluBwd, "bwd", {dy, fwd.inputs[0]}, {dx}).attrs.accumulate = acc;
  }

  void gelu(const Node& fwd, int dy) {
    bool acc = false;
    int dx = grads_.contributionTarget(g_, fwd.inputs[0], acc);
    emit(fwd, OpKind::GeluBwd, "bwd", {dy, fwd.inputs[0]}, {dx}).attrs.accumulate = acc;
  }

  void add(const Node& fwd, int dy) {
    // d(a+b)/da = d(a+b)/db = identity: both inputs share the output gradient.
    // Safe because every later writer into this buffer only adds to it, and
    // every reader of the branch gradient runs before those writers.
    for (int in : fwd.inputs) {
      if (!requiresGrad(g_, in)) continue;
      if (grads_.gradOf(in) >= 0)
        throw std::logic_error("autodiff: add input with an earlier gradient is not supported");
      grads_.alias(in, dy);
    }
  }

  // A summing all-reduce over a tensor-parallel group (a row-parallel
  // layer's partial products): each rank's partial contributes with weight
  // one, so its gradient is the sum's, the same on every rank.
  void groupSum(const Node& fwd, int dy) {
    if (!fwd.collective || fwd.collective->reduce != ReduceOp::Sum || fwd.inputs.at(0) == fwd.outputs.at(0))
      throw std::logic_error(fwd.name + ": autodiff differentiates only out-of-place summing all-reduces");
    if (grads_.gradOf(fwd.inputs[0]) >= 0)
      throw std::logic_error("autodiff: all-reduce input with an earlier gradient is not supported");
    grads_.alias(fwd.inputs[0], dy);
  }

  // Sequence parallelism's transitions over a tensor-parallel group: an
  // all-gather of each rank's tokens (before a column-parallel layer) and a
  // summing reduce-scatter of partial products into them (after a
  // row-parallel one) are each other's transposes, so each one's backward
  // is the other, out of place on the compute stream as in the forward.
  void sequenceTransition(const Node& fwd, int dy) {
    const bool gather = fwd.op == OpKind::AllGather;
    if (!fwd.collective || fwd.inputs.at(0) == fwd.outputs.at(0) ||
        (!gather && fwd.collective->reduce != ReduceOp::Sum))
      throw std::logic_error(fwd.name + ": autodiff differentiates only out-of-place gathers and summing scatters");
    bool acc = false;
    const int dx = grads_.contributionTarget(g_, fwd.inputs[0], acc);
    // The gradient of a rank's tokens (or partial) has no other contribution.
    if (acc) throw std::logic_error(fwd.name + ": its input's gradient has other contributions");
    Node& n = emit(fwd, gather ? OpKind::ReduceScatter : OpKind::AllGather, "bwd", {dy}, {dx});
    CollectiveInfo c = *fwd.collective;
    c.op = gather ? CollectiveOp::ReduceScatter : CollectiveOp::AllGather;
    c.reduce = ReduceOp::Sum;
    n.collective = c;
  }

  void embedding(const Node& fwd, int dy) {
    bool acc_wte = false, acc_wpe = false;
    std::vector<int> outs{grads_.contributionTarget(g_, fwd.inputs[1], acc_wte)};
    // Llama's embedding has no position table.
    if (fwd.inputs.size() > 2) outs.push_back(grads_.contributionTarget(g_, fwd.inputs[2], acc_wpe));
    // EmbeddingBwd: `accumulate` applies to dwte, `accumulate_params` to dwpe.
    Node& n = emit(fwd, OpKind::EmbeddingBwd, "bwd", {dy, fwd.inputs[0]}, outs);
    n.attrs.accumulate = acc_wte;
    n.attrs.accumulate_params = acc_wpe;
  }

  void crossEntropy(const Node& fwd, double loss_scale) {
    // In place: the logits buffer becomes dlogits (saves a [tokens, vocab] buffer).
    // A vocabulary-parallel loss also reads every rank's row statistics (its third input).
    const int logits = fwd.inputs[0];
    Node& n = emit(fwd, OpKind::CrossEntropyBwd, "bwd", fwd.inputs, {logits});
    n.attrs.loss_scale = loss_scale;
    grads_.alias(logits, logits);
  }

 private:
  Graph& g_;
  GradientState& grads_;
};

}  // namespace

void emitBackward(Graph& g, GradientState& grads, size_t first, size_t last, int losses,
                  double loss_scale) {
  // requires_grad flows forward from the parameters.
  for (size_t i = first; i < last; ++i) {
    const Node& n = g.nodes[i];
    // Activations received from an earlier pipeline stage carry their
    // gradient back to it.
    bool any = n.op == OpKind::Recv;
    for (int in : n.inputs) any = any || g.tensor(in).requires_grad;
    for (int out : n.outputs) g.tensor(out).requires_grad = any;
  }
  grads.ensureSize(g);
  BackwardEmitter em(g, grads);
  for (size_t i = last; i-- > first;) {
    const Node fwd = g.nodes[i];  // copy: emitting may reallocate the node vector
    // Data loads and pipeline transfers have nothing to differentiate (the
    // planner sends the received activations' gradient back).
    if (fwd.op == OpKind::LoadBatch || fwd.op == OpKind::Send || fwd.op == OpKind::Recv) continue;
    if (fwd.op == OpKind::CrossEntropy) {
      if (fwd.outputs[0] != losses) throw std::logic_error("autodiff: unexpected loss tensor");
      em.crossEntropy(fwd, loss_scale);
      continue;
    }
    const int dy = grads.gradOf(fwd.outputs[0]);
    if (dy < 0) continue;  // output does not influence the loss
    switch (fwd.op) {
      case OpKind::Matmul: em.matmul(fwd, dy); break;
      case OpKind::LayerNorm: em.layerNorm(fwd, dy); break;
      case OpKind::RmsNorm: em.rmsNorm(fwd, dy); break;
      case OpKind::SwiGlu: em.swiGlu(fwd, dy); break;
      case OpKind::SquaredRelu: em.squaredRelu(fwd, dy); break;
      case OpKind::Attention: em.attention(fwd, dy); break;
      case OpKind::PackKv: em.packKv(fwd, dy); break;
      case OpKind::Gelu: em.gelu(fwd, dy); break;
      case OpKind::Add: em.add(fwd, dy); break;
      case OpKind::Embedding: em.embedding(fwd, dy); break;
      case OpKind::AllReduce: em.groupSum(fwd, dy); break;
      case OpKind::AllGather:
      case OpKind::ReduceScatter: em.sequenceTransition(fwd, dy); break;
      default:
        throw std::logic_error(fmt::format("autodiff: no backward rule for {}", toString(fwd.op)));
    }
  }
}

}  // namespace tandem
