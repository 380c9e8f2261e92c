#include "engine/passes/recompute.h"

#include "engine/passes/framework_kernels.h"

#include <array>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem {

bool recomputeDrops(RecomputePolicy policy, const std::string& role, OpKind producer) {
  // The norms' outputs and the MLP's activation (GELU, or Llama's SwiGLU).
  static constexpr std::array<std::string_view, 5> kSelective{"ln1.out", "ln2.out", "gelu.out", "swiglu.out",
                                                              "relu2.out"};
  // Besides those: the norms' own outputs under sequence parallelism
  // (before their all-gather), the second and fourth GEMMs' outputs (with
  // tensor parallelism their partial products and the all-reduce's sum)
  // and the residual sum after the attention. The norms' fp32 statistics
  // stay: tiny, and the norms' backward reads them beside their input.
  static constexpr std::array<std::string_view, 7> kAlternate{
      "ln1.shard", "ln2.shard", "attproj.out", "attproj.out.partial", "fcproj.out", "fcproj.out.partial", "res2"};
  switch (policy) {
    case RecomputePolicy::None: return false;
    case RecomputePolicy::Selective:
      for (auto r : kSelective)
        if (role == r) return true;
      return false;
    case RecomputePolicy::Full:
      // Everything produced inside the block except its output (the next
      // block's input, which is always kept).
      return !role.empty() && role != "out";
    case RecomputePolicy::Attention:
      // The attention's output and what its backward reads besides QKV: the
      // probabilities (materialized; with dropout also the dropped ones and
      // the mask) or each row's log-sum-exp.
      return role == "att.out" || role == "att.lse" || role == "att.probs" || role == "att.dropped" ||
             role == "att.mask";
    case RecomputePolicy::AlternateGemms:
      // torchtitan keeps what a reduce-scatter made (sequence parallelism's
      // sums); an all-gather or all-reduce whose output is dropped reruns.
      if (producer == OpKind::ReduceScatter) return false;
      for (auto r : kSelective)
        if (role == r) return true;
      for (auto r : kAlternate)
        if (role == r) return true;
      return false;
  }
  return false;
}

namespace {

class Recomputer {
 public:
  Recomputer(Graph& g, const JobSpec& job) : g_(g), job_(job) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].phase == Phase::Forward) {
        for (int out : g.nodes[i].outputs) producer_[out] = i;
        if (blockOp(g.nodes[i])) block_nodes_[{g.nodes[i].layer, g.nodes[i].micro_batch}].push_back(i);
      }
  }

  bool dropped(int t) const {
    const Tensor& x = g_.tensor(t);
    if (x.category != TensorCategory::Activation || x.layer < 0) return false;
    if (!producer_.count(t)) return false;
    return recomputeDrops(job_.recompute.forLayer(x.layer), x.role, g_.nodes[producer_.at(t)].op);
  }

  // An op of a block's forward: every output an activation of its layer
  // (not a gathered weight, not a pipeline transfer).
  bool blockOp(const Node& n) const {
    if (n.layer < 0 || n.outputs.empty() || n.op == OpKind::Send || n.op == OpKind::Recv) return false;
    for (int o : n.outputs) {
      const Tensor& x = g_.tensor(o);
      if (x.category != TensorCategory::Activation || x.layer != n.layer) return false;
    }
    return true;
  }

  // Returns the recomputed twin of `t`, emitting the nodes that make it.
  int ensure(int t, std::vector<Node>& out) {
    if (auto it = twin_.find(t); it != twin_.end()) return it->second;
    const Node& fwd = g_.nodes[producer_.at(t)];
    // Full recompute runs the block's forward again, whole, as Megatron-LM's
    // checkpoint does (its CheckpointFunction calls the block's forward
    // function anew before the block's backward): the ops whose outputs no
    // backward reads run too, the block's last GEMM, its tensor-parallel
    // sum and the residual add. Only the ops the backward demands
    // (recompute.rerun: needed) leave out about a third of a block's
    // recomputed GEMM FLOPs.
    const std::pair<int, int> key{fwd.layer, fwd.micro_batch};
    if (job_.recompute.forLayer(fwd.layer) == RecomputePolicy::Full && job_.recompute.rerun == FullRerun::Block &&
        rerun_.insert(key).second) {
      const auto block = block_nodes_.find(key);
      if (block != block_nodes_.end())
        for (size_t i : block->second)
          if (!twin_.count(g_.nodes[i].outputs.front())) emit(g_.nodes[i], out);
      if (auto it = twin_.find(t); it != twin_.end()) return it->second;
    }
    if (job_.recompute.forLayer(fwd.layer) == RecomputePolicy::AlternateGemms &&
        job_.schedule.projections == Projections::Separate && rerun_.insert(key).second)
      rerunSecondParts(key, out);
    emit(g_.nodes[producer_.at(t)], out);
    return twin_.at(t);
  }

  // torchtitan's per-op selective recompute over its separate projections
  // (schedule.projections separate) reruns every second GEMM of the block
  // in forward order: q, k, v, o, gate, up, down. The output projection is
  // rerun where the backward demands it, as with fused GEMMs; the key and
  // up projections are parts of tandem's fused GEMMs, whose outputs stay
  // kept: their rerun is emitted here as a GEMM of the part's width whose
  // output nothing reads (the time and memory torchtitan spends on it).
  void rerunSecondParts(const std::pair<int, int>& key, std::vector<Node>& out) {
    const auto block = block_nodes_.find(key);
    if (block == block_nodes_.end()) return;
    for (size_t i : block->second) {
      const Node& fwd = g_.nodes[i];
      if (fwd.op != OpKind::Matmul) continue;
      const std::vector<int64_t> parts = separateProjections(fwd, job_);
      if (parts.size() < 2) continue;
      Node rc = fwd;
      rc.phase = Phase::Recompute;
      const bool qkv = parts.size() == 3;
      if (auto pos = rc.name.find(qkv ? ".attn.qkv.fwd." : ".mlp.fc.fwd."); pos != std::string::npos)
        rc.name.replace(pos, qkv ? 14 : 12, qkv ? ".attn.k.recompute." : ".mlp.up.recompute.");
      rc.attrs.n = parts[1];
      rc.attrs.has_bias = false;
      rc.inputs.resize(2);  // the input and the weight, no bias
      recomputedInputs(rc, out);
      Tensor part = g_.tensor(rc.outputs.front());
      part.name += qkv ? ".k.rc" : ".up.rc";
      part.role += ".part";
      part.shape.back() = parts[1];
      rc.outputs = {g_.addTensor(std::move(part))};
      out.push_back(std::move(rc));
    }
  }

  // A recomputed node's inputs: the twins made before or, where dropped,
  // made now.
  void recomputedInputs(Node& rc, std::vector<Node>& out) {
    for (int& in : rc.inputs) {
      if (auto it = twin_.find(in); it != twin_.end()) in = it->second;
      else if (dropped(in)) in = ensure(in, out);
    }
  }

  // Emits the recompute twin of forward node `fwd`.
  void emit(const Node& fwd, std::vector<Node>& out) {
    Node rc = fwd;
    rc.phase = Phase::Recompute;
    if (auto pos = rc.name.find(".fwd."); pos != std::string::npos)
      rc.name.replace(pos, 5, ".recompute.");
    recomputedInputs(rc, out);
    for (int& o : rc.outputs) {
      Tensor copy = g_.tensor(o);
      copy.name += ".rc";
      int id = g_.addTensor(std::move(copy));
      twin_[o] = id;
      o = id;
    }
    out.push_back(std::move(rc));
  }

  void run() {
    std::vector<Node> result;
    result.reserve(g_.nodes.size() * 3 / 2);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node n = g_.nodes[i];
      if (n.phase == Phase::Backward)
        for (int& in : n.inputs)
          if (dropped(in)) in = ensure(in, result);
      result.push_back(std::move(n));
    }
    g_.nodes = std::move(result);
  }

 private:
  Graph& g_;
  const JobSpec& job_;
  std::unordered_map<int, size_t> producer_;
  std::unordered_map<int, int> twin_;
  // Per (layer, micro-batch): its block's forward ops in order (blockOp).
  std::map<std::pair<int, int>, std::vector<size_t>> block_nodes_;
  std::set<std::pair<int, int>> rerun_;  // blocks whose re-run has been emitted
};

}  // namespace

void applyRecompute(Graph& g, const JobSpec& job) {
  bool any = job.recompute.policy != RecomputePolicy::None;
  for (const auto& [layer, policy] : job.recompute.per_layer)
    any = any || policy != RecomputePolicy::None;
  if (!any) return;
  Recomputer(g, job).run();
}

}  // namespace tandem
