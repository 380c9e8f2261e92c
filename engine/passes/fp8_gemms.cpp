#include "engine/passes/fp8_gemms.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/memory/gpu_footprint.h"
#include "engine/passes/buckets.h"

namespace tandem {
namespace {

bool isGemm(OpKind op) { return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight; }

// The blocks whose linear layers run in FP8: all but the first and last
// ones the job keeps in bf16 (training.fp8_bf16_first_layers, _last_);
// the embedding and the LM head (layer -1) stay in bf16, as Megatron-LM's
// FP8 recipe keeps them.
struct Fp8Blocks {
  int first = 0, end = 0;  // [first, end)
  bool holds(int layer) const { return layer >= first && layer < end; }
};

bool fp8Gemm(const Node& n, const Fp8Blocks& blocks) { return isGemm(n.op) && blocks.holds(n.layer); }

// Kernels that write their output in FP8 when only FP8 GEMMs read it.
bool castsItsOutput(OpKind op) {
  switch (op) {
    case OpKind::LayerNorm:
    case OpKind::RmsNorm:
    case OpKind::Gelu:
    case OpKind::SwiGlu:
    case OpKind::SquaredRelu:
    case OpKind::SquaredReluBwd:
    case OpKind::GeluBwd:
    case OpKind::SwiGluBwd: return true;
    default: return false;
  }
}

// Producers of FP8 that also write the K-major copy a backward GEMM reads:
// elementwise kernels, which a tiled kernel runs in both layouts from one
// computation, and the norms (their rows' statistics first, then the
// tiles).
bool writesBothLayouts(OpKind op) {
  switch (op) {
    case OpKind::LayerNorm:
    case OpKind::RmsNorm:
    case OpKind::Gelu:
    case OpKind::GeluBwd:
    case OpKind::SwiGlu:
    case OpKind::SwiGluBwd:
    case OpKind::SquaredRelu:
    case OpKind::SquaredReluBwd: return true;
    default: return false;
  }
}

// The grouped attention's backward writing its q, k and v gradient in FP8
// (training.fp8_attention_grad): the tensor-core kernels store each tile's
// codes in both layouts (engine/cuda/attention_tc.cu), so the shapes they
// take (heads 64 or 128 wide, bf16); nothing accumulated into the gradient,
// no bias gradient summed beside it, the whole sequence on the rank.
bool attentionWritesFp8Grad(const Node& n) {
  const OpAttrs& a = n.attrs;
  return n.op == OpKind::AttentionBwd && a.kv_heads > 0 && !a.bias_grad && !a.accumulate && !a.materialized &&
         a.context_parallel <= 1 && gpu_footprint::groupedAttentionOnTensorCores(a.c, a.h, 2);
}

// "layer3.attn.qkv.fwd.cast_x.mb0" from the GEMM "layer3.attn.qkv.fwd.mb0".
std::string castName(const Node& gemm, const char* operand) {
  std::string base = gemm.name;
  const std::string suffix = fmt::format(".mb{}", gemm.micro_batch);
  if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0)
    base.resize(base.size() - suffix.size());
  return fmt::format("{}.cast_{}{}", base, operand, suffix);
}

const char* operandName(const Node& gemm, size_t slot) {
  if (gemm.op == OpKind::AllGather) return "shard";
  if (gemm.op == OpKind::Matmul) return slot == 0 ? "x" : "w";
  if (gemm.op == OpKind::MatmulBwdData) return slot == 0 ? "dy" : "w";
  return slot == 0 ? "dy" : "x";
}

// A sequence-parallel all-gather of a rank's tokens (out of place, over "tp").
bool sequenceGather(const Node& n) {
  return n.op == OpKind::AllGather && n.collective && n.collective->group == "tp" && !n.inputs.empty() &&
         !n.outputs.empty() && n.inputs[0] != n.outputs[0];
}

// The tensors a parameter all-gather reads: each bucket's shard (ZeRO-3's
// copies before a use) and flat parameters (the sharded optimizer's gather
// in place after the update).
std::unordered_set<int> parameterGatherSources(const Graph& g) {
  std::unordered_set<int> sources;
  for (const BucketTensors& b : g.buckets)
    for (int t : {b.param_shard, b.param_flat})
      if (t >= 0) sources.insert(t);
  return sources;
}

class Fp8Planner {
 public:
  Fp8Planner(Graph& g, bool current, bool fused_elementwise, bool attention_grad, bool param_gather,
             Fp8Blocks blocks)
      : g_(g), current_(current), fused_elementwise_(fused_elementwise), attention_grad_(attention_grad),
        param_gather_(param_gather), blocks_(blocks) {
    for (const Node& n : g.nodes) {
      for (int t : n.outputs) ++writers_[t];
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const bool operand = fp8Gemm(n, blocks_) && i < 2;
        if (!operand) bf16_readers_[n.inputs[i]] += 1;
        else fp8_operands_.insert(n.inputs[i]);
        if (operand && fp8TransposedSlot(n.op, int(i))) read_transposed_.insert(n.inputs[i]);
      }
    }
  }

  int run() {
    if (param_gather_) gatherParametersInFp8();
    // Sequence parallelism: a gather that only FP8 GEMMs read moves FP8
    // (Transformer Engine casts the rank's tokens, then gathers them).
    for (Node& n : g_.nodes) {
      if (!sequenceGather(n)) continue;
      const int y = n.outputs[0];
      if (writers_[y] != 1 || bf16_readers_[y] != 0 || !readByFp8Gemm(y)) continue;
      g_.tensor(y).dtype = DType::F8;
      n.collective->dtype = DType::F8;
      n.collective->bytes = n.collective->count;
      fp8_gathers_.insert(y);
      bf16_readers_[n.inputs[0]] -= 1;  // the gather reads the rank's tokens in FP8 now
      gather_inputs_[n.inputs[0]] += 1;
    }
    // Outputs written in FP8 by their producer: every reader an FP8 operand
    // (or an FP8 gather). Under current scaling the producer cannot: the
    // scale needs the finished tensor's amax.
    for (Node& n : g_.nodes) {
      if (current_) break;
      const bool attention = attention_grad_ && attentionWritesFp8Grad(n);
      if (!(castsItsOutput(n.op) || attention) || n.outputs.empty()) continue;
      const int y = n.outputs[0];
      const Tensor& t = g_.tensor(y);
      if (t.category != TensorCategory::Activation || t.dtype != DType::BF16 || writers_[y] != 1 ||
          bf16_readers_[y] != 0 || !(readByFp8Gemm(y) || gather_inputs_.count(y)))
        continue;
      g_.tensor(y).dtype = DType::F8;
      n.attrs.fp8_out = true;
      if (!(writesBothLayouts(n.op) || attention) || !read_transposed_.count(y)) continue;
      const int copy = addTransposedCopy(y, n.layer);
      n.outputs.push_back(copy);
      n.attrs.fp8_transposed_out = true;
      producer_copy_[y] = copy;
    }
    std::vector<Node> out;
    out.reserve(g_.nodes.size() * 5 / 4);
    int casts = 0;
    for (Node n : g_.nodes) {
      if (sequenceGather(n) && fp8_gathers_.count(n.outputs[0]) && g_.tensor(n.inputs[0]).dtype != DType::F8) {
        const int src = n.inputs[0];
        auto it = copy_.find(src);
        if (it == copy_.end()) {
          it = copy_.emplace(src, addCast(n, 0, out)).first;
          ++casts;
        }
        n.inputs[0] = it->second.row_major;
      }
      if (fp8Gemm(n, blocks_)) {
        for (size_t slot = 0; slot < 2; ++slot) {
          const int src = n.inputs[slot];
          if (g_.tensor(src).dtype == DType::F8) {  // written in FP8 by its producer
            const auto copy = producer_copy_.find(src);
            if (fp8TransposedSlot(n.op, int(slot)) && copy != producer_copy_.end()) {
              n.inputs[slot] = copy->second;
              n.attrs.fp8_transposed |= 1 << slot;
            }
            continue;
          }
          auto it = copy_.find(src);
          if (it == copy_.end()) {
            it = copy_.emplace(src, addCast(n, slot, out)).first;
            ++casts;
          }
          const bool transposed = fp8TransposedSlot(n.op, int(slot)) && it->second.transposed >= 0;
          n.inputs[slot] = transposed ? it->second.transposed : it->second.row_major;
          if (transposed) n.attrs.fp8_transposed |= 1 << slot;
        }
        n.attrs.fp8 = true;
      }
      // A write makes the tensor's FP8 copy stale: the next reader casts again.
      for (int t : n.outputs) {
        copy_.erase(t);
        writer_op_[t] = n.op;
      }
      out.push_back(std::move(n));
    }
    g_.nodes = std::move(out);
    return casts;
  }

 private:
  bool readByFp8Gemm(int t) const { return fp8_operands_.count(t) > 0; }

  // training.fp8_param_gather: in each parameter all-gather, the weights
  // that only FP8 GEMMs read travel as FP8 codes (a byte each); the
  // bucket's other parameters (norm weights, embeddings) stay bf16 in the
  // same gather. ZeRO-3's copies, gathered for each use, arrive as the
  // GEMMs' operands (their views become FP8: no cast reads them, and the
  // data gradient's GEMM transposes the weight itself, as Megatron-FSDP
  // does with keep_fp8_transpose_cache off). The sharded optimizer's
  // gather fills the weights the whole step uses: their one cast a step
  // stays, standing for the transposed copy made once (Transformer
  // Engine's transpose cache). The flat buffer keeps its bf16 size.
  void gatherParametersInFp8() {
    std::unordered_map<int, std::vector<int>> views;  // gathered flat tensor -> its parameters' views
    for (const Tensor& t : g_.tensors)
      if (t.parent >= 0) views[t.parent].push_back(t.id);
    const std::unordered_set<int> sources = parameterGatherSources(g_);
    for (Node& n : g_.nodes) {
      const bool parameter_gather = n.op == OpKind::AllGather && n.collective && !n.inputs.empty() &&
                                    !n.outputs.empty() && sources.count(n.inputs[0]);
      if (!parameter_gather) continue;
      const bool in_place = n.inputs[0] == n.outputs[0];
      int64_t fp8_elements = 0;
      for (int v : views[n.outputs[0]]) {
        Tensor& t = g_.tensor(v);
        if (t.dtype != DType::BF16 || writers_[v] != 0 || bf16_readers_[v] != 0 || !readByFp8Gemm(v)) continue;
        if (!in_place) t.dtype = DType::F8;
        fp8_elements += t.elements();
      }
      // One byte saved per FP8 element: bf16 is two.
      n.collective->bytes -= fp8_elements * (dtypeSize(DType::BF16) - dtypeSize(DType::F8));
    }
  }

  // A tensor's FP8 copies: as stored, and (-1 when no FP8 GEMM reads it
  // K-major) transposed.
  struct Copies {
    int row_major = -1, transposed = -1;
  };

  // An FP8 tensor beside src named src + suffix: its copy as stored
  // (transposed false) or transposed ([columns, rows]).
  int addFp8Tensor(int src, const char* suffix, bool transposed, int layer) {
    const Tensor from = g_.tensor(src);  // a copy: adding tensors moves them
    Tensor t;
    t.name = from.name + suffix;
    t.dtype = DType::F8;
    const int64_t columns = from.shape.back();
    t.shape = transposed ? std::vector<int64_t>{columns, from.elements() / columns} : from.shape;
    // A weight's copy is transient (one step), counted with the parameters.
    t.category = from.category == TensorCategory::Parameter ? TensorCategory::Parameter : TensorCategory::Activation;
    t.layer = layer;
    t.micro_batch = from.micro_batch;
    t.role = from.role.empty() ? std::string("fp8") : from.role + ".fp8";
    return g_.addTensor(std::move(t));
  }
  int addTransposedCopy(int src, int layer) { return addFp8Tensor(src, ".fp8t", true, layer); }

  // A CastFp8 task right before `gemm`, writing an FP8 copy of its operand
  // in `slot`, and the transposed copy too when a GEMM reads the operand
  // K-major (Transformer Engine's cast-transpose): the backward's GEMMs
  // then read it as written instead of transposing it first.

  Copies addCast(const Node& gemm, size_t slot, std::vector<Node>& out) {
    const int src = gemm.inputs[slot];
    const int64_t elements = g_.tensor(src).elements();
    Copies copies;
    copies.row_major = addFp8Tensor(src, ".fp8", false, gemm.layer);
    if (read_transposed_.count(src)) copies.transposed = addTransposedCopy(src, gemm.layer);
    Node c;
    c.op = OpKind::CastFp8;
    c.name = castName(gemm, operandName(gemm, slot));
    c.phase = gemm.phase;
    c.layer = gemm.layer;
    c.micro_batch = gemm.micro_batch;
    c.inputs = {src};
    c.outputs = {copies.row_major};
    if (copies.transposed >= 0) c.outputs.push_back(copies.transposed);
    c.attrs.fp8_transposed_out = copies.transposed >= 0;
    c.attrs.elements = elements;
    c.attrs.current_scaling = current_;
    const auto w = writer_op_.find(src);
    c.attrs.amax_by_writer = current_ && fused_elementwise_ && w != writer_op_.end() &&
                             (w->second == OpKind::SwiGlu || w->second == OpKind::SwiGluBwd);
    out.push_back(std::move(c));
    return copies;
  }

  Graph& g_;
  bool current_ = false;  // training.fp8_scaling current
  bool fused_elementwise_ = true;  // one kernel per elementwise op (not schedule.elementwise eager)
  bool attention_grad_ = false;  // training.fp8_attention_grad
  bool param_gather_ = false;    // training.fp8_param_gather
  Fp8Blocks blocks_;
  std::unordered_map<int, int> writers_;
  std::unordered_map<int, int> bf16_readers_;
  std::unordered_set<int> fp8_operands_;  // tensors an FP8 GEMM reads as an operand
  std::unordered_set<int> read_transposed_;  // ... in a slot it reads K-major (fp8TransposedSlot)
  std::unordered_map<int, Copies> copy_;  // tensor -> its current FP8 copies
  std::unordered_map<int, int> producer_copy_;  // FP8 tensor -> the transposed copy its producer wrote
  std::unordered_map<int, OpKind> writer_op_;  // tensor -> the op of its latest writer so far
  std::unordered_set<int> fp8_gathers_;  // gathered tensors moved in FP8
  std::unordered_map<int, int> gather_inputs_;  // a rank's tokens -> FP8 gathers reading them
};

}  // namespace

std::optional<std::string> fp8ParamGatherRefusal(const JobSpec& job, std::string_view runner) {
  if (job.training.precision != Precision::FP8 || !job.training.fp8_param_gather ||
      !(shardsParameters(job) || shardsOptimizer(job)))
    return std::nullopt;
  return fmt::format("training.fp8_param_gather gathers the FP8 GEMMs' weights as FP8 codes, which `{}` does not "
                     "(its parameter all-gathers move bf16); set it false, or `tandem simulate` plans and times it",
                     runner);
}

int applyFp8Gemms(Graph& g, const JobSpec& job) {
  if (job.training.precision != Precision::FP8) return 0;
  const Fp8Blocks blocks{job.training.fp8_bf16_first_layers,
                         job.model.layers - job.training.fp8_bf16_last_layers};
  return Fp8Planner(g, job.training.fp8_scaling == Fp8Scaling::Current,
                    job.schedule.elementwise != ElementwiseKernels::Eager, job.training.fp8_attention_grad,
                    job.training.fp8_param_gather, blocks)
      .run();
}

}  // namespace tandem
