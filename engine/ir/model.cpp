#include "engine/ir/model.h"

#include "engine/passes/buckets.h"
#include "engine/passes/tensor_parallel.h"

#include <fmt/format.h>

namespace tandem {
namespace {

// Builds the forward of one micro-batch; keeps the naming in one place so
// task names read "layer3.attn.qkv.fwd.mb0" everywhere.
class ForwardBuilder {
 public:
  ForwardBuilder(Graph& g, const JobSpec& job, int mb, const ModelChunk& stage)
      : g_(g), job_(job), mb_(mb), dt_(activationDType(job)), stage_(stage) {
    const auto& m = job.model;
    B_ = job.training.micro_batch;
    T_ = job.rankSeqLen();  // with context parallelism the rank's two chunks of each sample
    cp_ = job.parallel.context_parallel;
    C_ = m.hidden;
    M_ = B_ * T_;
    tp_ = job.parallel.tensor_parallel;
    llama_ = job.model.family == ModelFamily::Llama;
    sp_ = tp_ > 1 && job.parallel.sequence_parallel;
    Ms_ = sp_ ? M_ / tp_ : M_;
  }

  // The residual stream's shape: with sequence parallelism the rank's
  // 1/tp of the micro-batch's tokens (consecutive rows of [B*T, C]).
  std::vector<int64_t> residualShape() const {
    if (sp_) return {Ms_, C_};
    return {B_, T_, C_};
  }

  int act(const std::string& name, std::vector<int64_t> shape, int layer, const std::string& role,
          DType dt) {
    Tensor t;
    t.name = fmt::format("{}.mb{}", name, mb_);
    t.dtype = dt;
    t.shape = std::move(shape);
    t.category = TensorCategory::Activation;
    t.layer = layer;
    t.micro_batch = mb_;
    t.role = role;
    return g_.addTensor(std::move(t));
  }
  int act(const std::string& name, std::vector<int64_t> shape, int layer, const std::string& role) {
    return act(name, std::move(shape), layer, role, dt_);
  }

  Node& node(OpKind op, const std::string& name, int layer, std::vector<int> in, std::vector<int> out) {
    Node n;
    n.op = op;
    n.name = fmt::format("{}.fwd.mb{}", name, mb_);
    n.phase = Phase::Forward;
    n.layer = layer;
    n.micro_batch = mb_;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    return g_.addNode(std::move(n));
  }

  // y = norm(x): GPT-2's LayerNorm, or Llama's RMSNorm (no bias, b < 0, and
  // no mean kept); returns y, whole on every rank. With sequence
  // parallelism the norm normalizes the rank's tokens ("<role>.shard") and
  // an all-gather over the group gives every rank all of them
  // ("<role>.out", what the next layer reads and recompute may drop and
  // gather again).
  int norm(const std::string& prefix, int layer, const std::string& role, int x, int w, int b) {
    int y = act(prefix + ".out", residualShape(), layer, role + (sp_ ? ".shard" : ".out"));
    const std::vector<int64_t> per_token = sp_ ? std::vector<int64_t>{Ms_} : std::vector<int64_t>{B_, T_};
    if (llama_) {
      int rstd = act(prefix + ".rstd", per_token, layer, role + ".rstd", DType::F32);
      Node& n = node(OpKind::RmsNorm, prefix, layer, {x, w}, {y, rstd});
      n.attrs.m = Ms_;
      n.attrs.c = C_;
    } else {
      int mean = act(prefix + ".mean", per_token, layer, role + ".mean", DType::F32);
      int rstd = act(prefix + ".rstd", per_token, layer, role + ".rstd", DType::F32);
      Node& n = node(OpKind::LayerNorm, prefix, layer, {x, w, b}, {y, mean, rstd});
      n.attrs.m = Ms_;
      n.attrs.c = C_;
    }
    if (!sp_) return y;
    int all = act(prefix + ".allgather.out", {B_, T_, C_}, layer, role + ".out");
    Node& ag = node(OpKind::AllGather, prefix + ".allgather", layer, {y}, {all});
    ag.attrs.elements = M_ * C_;
    ag.attrs.shards = tp_;
    ag.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, M_ * C_, dt_, "tp");
    return all;
  }

  int matmul(const std::string& prefix, int layer, const std::string& role, int x, int w, int bias,
             int64_t n_out, int64_t k_in) {
    int y = act(prefix + ".out", {B_, T_, n_out}, layer, role);
    std::vector<int> in{x, w};
    if (bias >= 0) in.push_back(bias);
    Node& n = node(OpKind::Matmul, prefix, layer, in, {y});
    n.attrs.m = M_;
    n.attrs.n = n_out;
    n.attrs.k = k_in;
    n.attrs.has_bias = bias >= 0;
    return y;
  }

  // Tensor parallelism: a row-parallel layer's output is this rank's partial
  // product (role `role` + ".partial"); the all-reduce over the rank's
  // tensor-parallel group writes the sum, the layer's output, to a tensor
  // of its own. Its backward is the identity (autodiff aliases the two
  // gradients). With sequence parallelism a reduce-scatter writes the
  // sum's rows of the rank's tokens instead (its backward an all-gather).
  // On the compute stream: the next task needs the sum.
  int sumOverGroup(const std::string& prefix, int layer, const std::string& role, int partial) {
    if (tp_ <= 1) return partial;
    g_.tensor(partial).role = role + ".partial";
    if (sp_) {
      int y = act(prefix + ".reducescatter.out", residualShape(), layer, role);
      Node& n = node(OpKind::ReduceScatter, prefix + ".reducescatter", layer, {partial}, {y});
      n.attrs.elements = M_ * C_;
      n.attrs.shards = tp_;
      n.collective = dataParallelCollective(CollectiveOp::ReduceScatter, ReduceOp::Sum, M_ * C_, dt_, "tp");
      return y;
    }
    int y = act(prefix + ".allreduce.out", {B_, T_, C_}, layer, role);
    Node& n = node(OpKind::AllReduce, prefix + ".allreduce", layer, {partial}, {y});
    n.attrs.elements = M_ * C_;
    n.collective = tensorParallelCollective(M_ * C_, dt_);
    return y;
  }

  // A block's output projection: [.., k] -> [.., C], k this rank's slice.
  int rowParallel(const std::string& prefix, int layer, const std::string& role, int x, int w, int bias,
                  int64_t k) {
    int y = matmul(prefix, layer, role, x, w, bias, C_, k);
    if (tp_ > 1) g_.nodes.back().attrs.tensor_parallel = tp_;
    return sumOverGroup(prefix, layer, role, y);
  }

  void setAttentionShape(OpAttrs& a, int64_t H, int64_t Cl, int64_t KV) const {
    a.b = B_;
    a.t = T_;
    a.c = Cl;
    a.h = H;
    if (llama_) a.kv_heads = KV;
    if (cp_ > 1) a.context_parallel = cp_;
    a.materialized = job_.schedule.materialized_attention;
    a.dropout = job_.model.attention_dropout;
  }

  // Context parallelism: the keys and values of the rank's tokens, packed
  // out of qkv and all-gathered over the rank's context-parallel group, so
  // its queries can attend to the whole sequence's. On the compute stream:
  // the attention waits for them. Returns the gathered [cp, B, T, 2, KV x D].
  int gatherKeysAndValues(const std::string& pre, int layer, int qkv, int64_t H, int64_t KV, int64_t D) {
    const int64_t width = 2 * KV * D;
    int kv = act(pre + ".attn.kv", {B_, T_, width}, layer, "att.kv");
    {
      Node& n = node(OpKind::PackKv, pre + ".attn.kv", layer, {qkv}, {kv});
      setAttentionShape(n.attrs, H, H * D, KV);
      n.attrs.elements = M_ * width;
    }
    int all = act(pre + ".attn.kv.allgather.out", {cp_, B_, T_, width}, layer, "att.kv.gathered");
    Node& ag = node(OpKind::AllGather, pre + ".attn.kv.allgather", layer, {kv}, {all});
    const int64_t count = int64_t(cp_) * M_ * width;
    ag.attrs.elements = count;
    ag.attrs.shards = cp_;
    ag.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, count, dt_, "cp");
    return all;
  }

  int add(const std::string& prefix, int layer, const std::string& role, int a, int b) {
    int c = act(prefix + ".out", residualShape(), layer, role);
    Node& n = node(OpKind::Add, prefix, layer, {a, b}, {c});
    n.attrs.elements = Ms_ * C_;
    return c;
  }

  ForwardOutputs build(const ModelParams& p) {
    const auto& m = job_.model;
    ForwardOutputs out;
    // The tokens feed the embedding (first stage), the targets the loss (last).
    if (stage_.first() || stage_.last()) {
      out.tokens = act("tokens", {B_, T_}, -1, "tokens", DType::I32);
      out.targets = act("targets", {B_, T_}, -1, "targets", DType::I32);
      g_.tensor(out.tokens).category = TensorCategory::Input;
      g_.tensor(out.targets).category = TensorCategory::Input;
      Node n;
      n.op = OpKind::LoadBatch;
      n.name = fmt::format("data.load.mb{}", mb_);
      n.phase = Phase::Data;
      n.micro_batch = mb_;
      n.outputs = {out.tokens, out.targets};
      n.attrs.b = B_;
      n.attrs.t = T_;
      n.attrs.micro_batch = mb_;
      g_.addNode(std::move(n));
    }
    int x = -1;
    if (stage_.first()) {
      // With the vocabulary split, each rank's rows of the tokens it holds,
      // summed over the group.
      x = act("embed.out", {B_, T_, C_}, -1, "embed.out");
      std::vector<int> in{out.tokens, p.wte};
      if (p.wpe >= 0) in.push_back(p.wpe);  // Llama: positions are rotary, in the attention
      Node& n = node(OpKind::Embedding, "embed", -1, in, {x});
      n.attrs.b = B_;
      n.attrs.t = T_;
      n.attrs.c = C_;
      n.attrs.v = m.vocab;
      if (cp_ > 1) n.attrs.context_parallel = cp_;  // the positions of the rank's chunks
      if (tp_ > 1) {
        n.attrs.tensor_parallel = tp_;
        x = sumOverGroup("embed", -1, "embed.out", x);
      }
    } else {
      x = out.stage_input = act("pipe.in" + stage_.tag(), residualShape(), -1, "pipe.in");
      g_.addNode(pipelineTransfer(g_, OpKind::Recv, fmt::format("pipe.recv.fwd{}.mb{}", stage_.tag(), mb_), x,
                                  stage_.boundaryBefore(), Phase::Comm, mb_));
    }
    // Per rank: a 1/tensor_parallel of the heads and of the MLP's width.
    const int64_t H = m.heads / tp_, Cl = C_ / tp_;
    const int64_t F = m.mlpHidden() / tp_;
    const int64_t KV = (m.kv_heads > 0 ? m.kv_heads : m.heads) / tp_, D = C_ / m.heads;
    for (int l = stage_.first_layer; l < stage_.end_layer; ++l) {
      const auto& L = p.layers.at(size_t(l - stage_.first_layer));
      const std::string pre = fmt::format("layer{}", l);
      int ln1 = norm(pre + ".ln1", l, "ln1", x, L.ln1_w, L.ln1_b);
      // GPT-2: [q | k | v] of the rank's heads; Llama: its key/value groups.
      const int64_t qkv_width = llama_ ? (H + 2 * KV) * D : 3 * Cl;
      int qkv = matmul(pre + ".attn.qkv", l, "qkv", ln1, L.qkv_w, L.qkv_b, qkv_width, C_);
      int atty = act(pre + ".attn.core.out", {B_, T_, Cl}, l, "att.out");
      // The probabilities kept for the backward when the score matrix is
      // materialized, else each row's log-sum-exp.
      const bool materialized = job_.schedule.materialized_attention;
      int lse = materialized ? act(pre + ".attn.core.probs", {B_, H, T_, T_}, l, "att.probs")
                             : act(pre + ".attn.core.lse", {B_, H, T_}, l, "att.lse", DType::F32);
      std::vector<int> outs{atty, lse};
      if (job_.model.attention_dropout > 0) {
        // What P V reads, and which probabilities were kept (Megatron keeps
        // both for the backward: with the probabilities, 5 bytes per score
        // in 16-bit types).
        outs.push_back(act(pre + ".attn.core.dropped", {B_, H, T_, T_}, l, "att.dropped"));
        outs.push_back(act(pre + ".attn.core.mask", {B_, H, T_, T_}, l, "att.mask", DType::U8));
      }
      {
        std::vector<int> in{qkv};
        if (cp_ > 1) in.push_back(gatherKeysAndValues(pre, l, qkv, H, KV, D));
        Node& n = node(OpKind::Attention, pre + ".attn.core", l, in, outs);
        setAttentionShape(n.attrs, H, Cl, KV);
      }
      int proj = rowParallel(pre + ".attn.proj", l, "attproj.out", atty, L.attproj_w, L.attproj_b, Cl);
      int res2 = add(pre + ".attn.residual", l, "res2", x, proj);
      int ln2 = norm(pre + ".ln2", l, "ln2", res2, L.ln2_w, L.ln2_b);
      int hidden = -1;
      if (llama_ && job_.model.mlp_activation == MlpActivation::SquaredRelu) {
        // Nemotron-4's ungated MLP: relu(x)^2 of the input layer.
        int fc = matmul(pre + ".mlp.fc", l, "fc.out", ln2, L.fc_w, -1, F, C_);
        hidden = act(pre + ".mlp.relu2.out", {B_, T_, F}, l, "relu2.out");
        Node& n = node(OpKind::SquaredRelu, pre + ".mlp.relu2", l, {fc}, {hidden});
        n.attrs.elements = M_ * F;
      } else if (llama_) {
        // SwiGLU: the input layer's [gate | up] halves, silu(gate) * up.
        int fc = matmul(pre + ".mlp.fc", l, "fc.out", ln2, L.fc_w, -1, 2 * F, C_);
        hidden = act(pre + ".mlp.swiglu.out", {B_, T_, F}, l, "swiglu.out");
        Node& n = node(OpKind::SwiGlu, pre + ".mlp.swiglu", l, {fc}, {hidden});
        n.attrs.m = M_;
        n.attrs.c = F;
        n.attrs.elements = M_ * F;
      } else {
        int fc = matmul(pre + ".mlp.fc", l, "fc.out", ln2, L.fc_w, L.fc_b, F, C_);
        hidden = act(pre + ".mlp.gelu.out", {B_, T_, F}, l, "gelu.out");
        Node& n = node(OpKind::Gelu, pre + ".mlp.gelu", l, {fc}, {hidden});
        n.attrs.elements = M_ * F;
      }
      int fcproj = rowParallel(pre + ".mlp.proj", l, "fcproj.out", hidden, L.fcproj_w, L.fcproj_b, F);
      x = add(pre + ".mlp.residual", l, "out", res2, fcproj);
    }
    if (!stage_.last()) {
      out.stage_output = x;
      g_.addNode(pipelineTransfer(g_, OpKind::Send, fmt::format("pipe.send.fwd{}.mb{}", stage_.tag(), mb_), x,
                                  stage_.boundaryAfter(), Phase::Comm, mb_));
      return out;
    }
    int lnf = norm("final.ln", -1, "lnf", x, p.lnf_w, p.lnf_b);
    // With the vocabulary split, the rank's columns of the logits.
    const int64_t V = m.vocab / tp_;
    int logits = act("lm_head.logits", {B_, T_, V}, -1, "logits");
    {
      Node& n = node(OpKind::Matmul, "lm_head", -1, {lnf, p.lm_head}, {logits});
      n.attrs.m = M_;
      n.attrs.n = V;
      n.attrs.k = C_;
    }
    out.losses = act("loss.per_token", {B_, T_}, -1, "losses", DType::F32);
    if (tp_ <= 1) {
      Node& n = node(OpKind::CrossEntropy, "loss", -1, {logits, out.targets}, {out.losses});
      n.attrs.m = M_;
      n.attrs.v = V;
      return out;
    }
    // Vocabulary-parallel loss: each rank's three numbers per token, gathered
    // over the group, combined by every rank into the same losses (and
    // read again by the backward for the softmax over every column).
    int stats = act("loss.stats", {B_, T_, 3}, -1, "loss.stats", DType::F32);
    {
      Node& n = node(OpKind::CrossEntropyStats, "loss.stats", -1, {logits, out.targets}, {stats});
      n.attrs.m = M_;
      n.attrs.v = V;
      n.attrs.tensor_parallel = tp_;
    }
    int gathered = act("loss.stats.gathered", {tp_, B_, T_, 3}, -1, "loss.stats", DType::F32);
    {
      Node& n = node(OpKind::AllGather, "loss.stats.allgather", -1, {stats}, {gathered});
      const int64_t count = int64_t(tp_) * M_ * 3;
      n.attrs.elements = count;
      n.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, count, DType::F32, "tp");
    }
    {
      Node& n = node(OpKind::CrossEntropy, "loss", -1, {logits, out.targets, gathered}, {out.losses});
      n.attrs.m = M_;
      n.attrs.v = V;
      n.attrs.tensor_parallel = tp_;
    }
    return out;
  }

 private:
  Graph& g_;
  const JobSpec& job_;
  int mb_;
  DType dt_;
  int64_t B_ = 0, T_ = 0, C_ = 0, M_ = 0;
  int tp_ = 1;
  int cp_ = 1;  // context parallelism
  bool llama_ = false;
  bool sp_ = false;  // sequence parallelism
  int64_t Ms_ = 0;   // tokens of the residual stream this rank holds
  ModelChunk stage_;  // the blocks this forward runs
};

// Tensor parallelism: how a parameter is split over a group's ranks.
struct Split {
  int dim = -1;  // ParamInfo::split_dim
  int blocks = 1;
};

int addParam(Graph& g, const JobSpec& job, const std::string& name, std::vector<int64_t> shape,
             int layer, bool decay, Split split = {}) {
  if (job.parallel.tensor_parallel <= 1) split = {};
  if (split.dim >= 0) shape.at(size_t(split.dim)) /= job.parallel.tensor_parallel;
  const bool bf16 = job.training.precision != Precision::FP32;  // fp8: bf16 weights, FP8 copies for the GEMMs
  auto make = [&](const std::string& suffix, TensorCategory cat, DType dt) {
    Tensor t;
    t.name = name + suffix;
    t.dtype = dt;
    t.shape = shape;
    t.category = cat;
    t.layer = layer;
    t.persistent = true;
    return g.addTensor(std::move(t));
  };
  ParamTensors p;
  p.name = name;
  p.param = make("", TensorCategory::Parameter, bf16 ? DType::BF16 : DType::F32);
  g.tensor(p.param).requires_grad = true;
  p.grad = make(".grad", TensorCategory::Gradient, bf16 ? DType::BF16 : DType::F32);
  if (shardsOptimizer(job)) {
    // Master weights and moments live in per-bucket shards (pass_buckets.h).
    p.master = bf16 ? -1 : p.param;
  } else {
    p.master = bf16 ? make(".master", TensorCategory::MasterWeight, DType::F32) : p.param;
    p.adam_m = make(".adam_m", TensorCategory::OptimizerState, DType::F32);
    p.adam_v = make(".adam_v", TensorCategory::OptimizerState, DType::F32);
  }
  p.weight_decay = decay;
  p.split_dim = split.dim;
  p.split_blocks = split.blocks;
  // Whole parameters are held (with the same gradients) by every rank of a
  // tensor-parallel group.
  if (split.dim < 0) p.copies = job.parallel.tensor_parallel;
  g.params.push_back(p);
  return p.param;
}

}  // namespace

DType activationDType(const JobSpec& job) {
  return job.training.precision == Precision::FP32 ? DType::F32 : DType::BF16;
}

ModelParams addModelParameters(Graph& g, const JobSpec& job, const ModelChunk& stage) {
  const auto& m = job.model;
  const bool llama = m.family == ModelFamily::Llama;
  const int64_t V = m.vocab, T = m.seq_len, C = m.hidden, F = m.mlpHidden();
  const int64_t KV = m.kv_heads > 0 ? m.kv_heads : m.heads, D = C / m.heads;
  // The tied embedding held by the first and the last of several stages.
  const bool embedding_twice = m.tied_embeddings && stage.count > 1;
  // Tensor parallelism splits the embedding and the LM head by vocabulary
  // rows (Megatron-LM's vocabulary-parallel embedding and loss).
  const Split vocab_rows{0, 1};
  ModelParams p;
  if (stage.first()) {
    p.wte = addParam(g, job, "wte", {V, C}, -1, true, vocab_rows);
    if (embedding_twice) g.params.back().copies *= 2;
    if (!llama) p.wpe = addParam(g, job, "wpe", {T, C}, -1, false);
  }
  for (int l = stage.first_layer; l < stage.end_layer && llama; ++l) {
    const std::string pre = fmt::format("layer{}.", l);
    BlockParams L;
    // Tensor parallelism: whole key/value groups per rank (the QKV rows are
    // laid out by group), each rank's rows of the gate and of the up
    // halves, the output projections' columns.
    const Split groups{0, 1}, gate_up{0, 2}, rows{0, 1}, columns{1, 1};
    const bool gated = m.mlp_activation == MlpActivation::SwiGlu;
    L.ln1_w = addParam(g, job, pre + "ln1.weight", {C}, l, false);
    L.qkv_w = addParam(g, job, pre + "attn.qkv.weight", {(m.heads + 2 * KV) * D, C}, l, true, groups);
    L.attproj_w = addParam(g, job, pre + "attn.proj.weight", {C, C}, l, true, columns);
    L.ln2_w = addParam(g, job, pre + "ln2.weight", {C}, l, false);
    L.fc_w = gated ? addParam(g, job, pre + "mlp.fc.weight", {2 * F, C}, l, true, gate_up)
                   : addParam(g, job, pre + "mlp.fc.weight", {F, C}, l, true, rows);
    L.fcproj_w = addParam(g, job, pre + "mlp.proj.weight", {C, F}, l, true, columns);
    p.layers.push_back(L);
  }
  for (int l = stage.first_layer; l < stage.end_layer && !llama; ++l) {
    const std::string pre = fmt::format("layer{}.", l);
    BlockParams L;
    L.ln1_w = addParam(g, job, pre + "ln1.weight", {C}, l, false);
    L.ln1_b = addParam(g, job, pre + "ln1.bias", {C}, l, false);
    // Tensor parallelism: column-parallel QKV (each rank's heads' rows of
    // the query, key and value blocks) and MLP input layer, row-parallel
    // output projections; their biases are added once (op_attrs.h).
    const Split rows{0, 1}, qkv_rows{0, 3}, columns{1, 1};
    L.qkv_w = addParam(g, job, pre + "attn.qkv.weight", {3 * C, C}, l, true, qkv_rows);
    L.qkv_b = addParam(g, job, pre + "attn.qkv.bias", {3 * C}, l, false, qkv_rows);
    L.attproj_w = addParam(g, job, pre + "attn.proj.weight", {C, C}, l, true, columns);
    L.attproj_b = addParam(g, job, pre + "attn.proj.bias", {C}, l, false);
    L.ln2_w = addParam(g, job, pre + "ln2.weight", {C}, l, false);
    L.ln2_b = addParam(g, job, pre + "ln2.bias", {C}, l, false);
    L.fc_w = addParam(g, job, pre + "mlp.fc.weight", {F, C}, l, true, rows);
    L.fc_b = addParam(g, job, pre + "mlp.fc.bias", {F}, l, false, rows);
    L.fcproj_w = addParam(g, job, pre + "mlp.proj.weight", {C, F}, l, true, columns);
    L.fcproj_b = addParam(g, job, pre + "mlp.proj.bias", {C}, l, false);
    p.layers.push_back(L);
  }
  if (!stage.last()) return p;
  p.lnf_w = addParam(g, job, "final.ln.weight", {C}, -1, false);
  if (!llama) p.lnf_b = addParam(g, job, "final.ln.bias", {C}, -1, false);
  if (!m.tied_embeddings) {
    p.lm_head = addParam(g, job, "lm_head.weight", {V, C}, -1, true, vocab_rows);
  } else if (stage.first()) {
    p.lm_head = p.wte;
  } else {  // the last stage's copy of the embedding, same name, same initial values
    p.lm_head = addParam(g, job, "wte", {V, C}, -1, true, vocab_rows);
    g.params.back().copies *= 2;
  }
  return p;
}

ForwardOutputs emitForward(Graph& g, const JobSpec& job, const ModelParams& p, int micro_batch,
                               const ModelChunk& stage) {
  ForwardBuilder b(g, job, micro_batch, stage);
  return b.build(p);
}

}  // namespace tandem
