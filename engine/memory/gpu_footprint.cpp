#include "engine/memory/gpu_footprint.h"

#include <algorithm>
#include <map>

#include "engine/numerics/fp8_history.h"
#include "engine/numerics/init.h"
#include "engine/plan/plan.h"

namespace tandem::gpu_footprint {
namespace {

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }
int64_t chunksOf(int64_t n) { return (n + kChunkElements - 1) / kChunkElements; }
constexpr int64_t kFloat = int64_t(sizeof(float));

// Whether an FP8 GEMM transposes the operand in `slot` itself: its cast
// wrote no transposed copy (OpAttrs::fp8_transposed).
bool transposesItself(const Task& t, int slot) { return !(t.attrs.fp8_transposed & (1 << slot)); }

}  // namespace

int64_t biasGradientScratchBytes(int64_t N) { return std::max(kBiasRowChunks, kBiasVecChunks) * N * kFloat; }

int64_t layernormScratchBytes(int64_t C, bool bias_grad) {
  // Partial rows of dw and db (and the residual gradient's sums) per warp.
  const int64_t partials = int64_t(kLayernormBwdWarps) * C * (bias_grad ? 3 : 2) * kFloat;
  return bias_grad ? std::max(partials, biasGradientScratchBytes(C)) : partials;
}

int64_t attentionBiasPartialRows(int64_t B, int64_t Tn) { return B * ((Tn + 63) / 64); }

int64_t attentionScratchBytes(int64_t B, int64_t Tn, int64_t H, int64_t C, bool bias_grad) {
  const int64_t delta = B * H * Tn * kFloat;  // rowsum(dO * O) per query row and head
  if (!bias_grad) return delta;
  return std::max(delta + attentionBiasPartialRows(B, Tn) * 3 * C * kFloat, biasGradientScratchBytes(3 * C));
}

int64_t crossEntropyScratchBytes(int64_t M) { return M * kFloat; }

int64_t rmsnormScratchBytes(int64_t C) {
  return int64_t(std::max({kBiasRowChunks, kBiasVecChunks, kLayernormBwdBlocks})) * C * kFloat;
}

int64_t groupedQkvBytes(int64_t B, int64_t Tn, int64_t C, int64_t element_bytes) {
  return align256(B * Tn * 3 * C * element_bytes);
}

bool groupedAttentionOnTensorCores(int64_t C, int64_t H, int64_t element_bytes) {
  return element_bytes == 2 && H > 0 && C % H == 0 && (C / H == 64 || C / H == 128);
}

int64_t rotatedQkBytes(int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV) {
  return align256(B * Tn * (H + KV) * (C / H) * 2);
}

int64_t ropeAngleBytes(int64_t Tn, int64_t D) { return align256(Tn * (D / 2) * 2 * kFloat); }

int64_t groupedAttentionScratchBytes(int64_t B, int64_t Tn, int64_t H, int64_t C, int64_t KV, int64_t element_bytes,
                                     bool backward) {
  if (groupedAttentionOnTensorCores(C, H, element_bytes)) {
    const int64_t copies = rotatedQkBytes(B, Tn, C, H, KV) + ropeAngleBytes(Tn, C / H);
    return backward ? copies + attentionScratchBytes(B, Tn, H, C) : copies;
  }
  const int64_t copy = groupedQkvBytes(B, Tn, C, element_bytes);
  return backward ? 2 * copy + attentionScratchBytes(B, Tn, H, C) : copy;
}

int64_t fp8TransposeSecondOffset(const Task& t) {
  return t.op == OpKind::MatmulBwdWeight && t.attrs.fp8 && transposesItself(t, 0) ? align256(t.attrs.m * t.attrs.n)
                                                                                  : 0;
}

int64_t fp8TransposeBytes(const Task& t) {
  if (!t.attrs.fp8) return 0;
  const OpAttrs& a = t.attrs;
  if (t.op == OpKind::MatmulBwdData) return transposesItself(t, 1) ? align256(a.n * a.k) : 0;
  if (t.op == OpKind::MatmulBwdWeight)
    return fp8TransposeSecondOffset(t) + (transposesItself(t, 1) ? align256(a.m * a.k) : 0);
  return 0;
}

int fp8TransposeCount(const Task& t) {
  if (!t.attrs.fp8) return 0;
  if (t.op == OpKind::MatmulBwdData) return transposesItself(t, 1);
  if (t.op == OpKind::MatmulBwdWeight) return int(transposesItself(t, 0)) + int(transposesItself(t, 1));
  return 0;
}

std::vector<std::pair<int, int>> fp8AmaxProducers(const RankPlan& rp) {
  std::vector<std::pair<int, int>> pairs;
  std::vector<int> last_writer(rp.buffers.size(), -1);
  std::vector<bool> taken(rp.tasks.size(), false);
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    if (t.op == OpKind::CastFp8 && t.attrs.amax_by_writer) {
      const int w = last_writer.at(size_t(t.reads.at(0)));
      const bool whole_output = w >= 0 && (rp.tasks[size_t(w)].op == OpKind::SwiGlu ||
                                           rp.tasks[size_t(w)].op == OpKind::SwiGluBwd);
      if (whole_output && rp.tasks[size_t(w)].writes.at(0) == t.reads[0] && !taken[size_t(w)]) {
        pairs.emplace_back(w, int(i));
        taken[size_t(w)] = true;
      }
    }
    for (int b : t.writes) last_writer.at(size_t(b)) = int(i);
  }
  return pairs;
}

Fp8DelayedKeys fp8DelayedKeys(const RankPlan& rp) {
  Fp8DelayedKeys keys;
  keys.of_task.assign(rp.tasks.size(), -1);
  std::map<std::string, int> index;
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    const bool writes_fp8 = std::any_of(t.writes.begin(), t.writes.end(),
                                        [&](int b) { return rp.buffers.at(size_t(b)).dtype == DType::F8; });
    if (!writes_fp8 || (t.op == OpKind::CastFp8 && t.attrs.current_scaling)) continue;
    const std::string key = fp8CastKey(t.name);
    const auto [at, added] = index.try_emplace(key, int(keys.names.size()));
    if (added) {
      keys.names.push_back(key);
      keys.backward.push_back(t.phase == Phase::Backward);
    }
    keys.of_task[i] = at->second;
  }
  return keys;
}

int64_t fp8DelayedStateBytes(int keys) {
  if (keys == 0) return 0;
  return 5 * fp8DelayedArrayBytes(keys) + align256(int64_t(keys) * kFp8History * 4);
}

int64_t fp8ScaleBytes(const RankPlan& rp) {
  const int64_t fp8 =
      std::count_if(rp.buffers.begin(), rp.buffers.end(), [](const Buffer& b) { return b.dtype == DType::F8; });
  if (fp8 == 0) return 0;
  return fp8 * kFp8ScaleSlotBytes + int64_t(fp8AmaxProducers(rp).size()) * kFp8AmaxPartialsBytes +
         fp8DelayedStateBytes(int(fp8DelayedKeys(rp).names.size()));
}

int64_t taskScratchBytes(const RankPlan& rp, const Task& t) {
  const OpAttrs& a = t.attrs;
  // The activations' element size: the qkv buffer the attention reads.
  auto element = [&](int buffer) { return int64_t(dtypeSize(rp.buffers.at(size_t(buffer)).dtype)); };
  switch (t.op) {
    case OpKind::LayerNormBwd: return layernormScratchBytes(a.c, a.bias_grad);
    case OpKind::RmsNormBwd: return rmsnormScratchBytes(a.c);
    case OpKind::Attention:
      return a.kv_heads > 0 ? groupedAttentionScratchBytes(a.b, a.t, a.h, a.c, a.kv_heads, element(t.reads[0]), false)
                            : 0;
    case OpKind::AttentionBwd:
      if (a.kv_heads > 0)
        return groupedAttentionScratchBytes(a.b, a.t, a.h, a.c, a.kv_heads, element(t.reads[1]), true);
      return attentionScratchBytes(a.b, a.t, a.h, a.c, a.bias_grad);
    case OpKind::CrossEntropy:
    case OpKind::CrossEntropyBwd: return crossEntropyScratchBytes(a.m);
    case OpKind::MatmulBwdWeight:
      return std::max(fp8TransposeBytes(t), a.has_bias ? biasGradientScratchBytes(a.n) : 0);
    case OpKind::MatmulBwdData: return fp8TransposeBytes(t);
    case OpKind::CastFp8: return int64_t(kFp8AmaxBlocks) * kFloat;
    default: return 0;
  }
}

std::vector<int64_t> scratchBytesPerStream(const RankPlan& rp) {
  std::vector<int64_t> bytes(rp.streams.size(), 256);
  for (const Task& t : rp.tasks) bytes.at(size_t(t.stream)) = std::max(bytes[size_t(t.stream)], taskScratchBytes(rp, t));
  return bytes;
}

Footprint executorFootprint(const Plan& plan) { return executorFootprint(largestProgram(plan)); }

const RankPlan& largestProgram(const Plan& plan) {
  const RankPlan* largest = &plan.programs.at(0);
  int64_t most = runBytes(*largest);
  for (const RankPlan& rp : plan.programs)
    if (const int64_t b = runBytes(rp); b > most) {
      most = b;
      largest = &rp;
    }
  return *largest;
}

Footprint executorFootprint(const RankPlan& rp) {
  Footprint f;
  for (const StreamInfo& s : rp.streams)
    if (s.kind == StreamKind::Compute) f.gemm_workspaces += kGemmWorkspaceBytes;
  for (int64_t b : scratchBytesPerStream(rp)) f.scratch += align256(b);
  f.fp8_scales = fp8ScaleBytes(rp);
  for (const Task& t : rp.tasks) {
    if (t.op == OpKind::LoadBatch) {
      // Tokens and targets of the micro-batch, staged as 32-bit integers.
      const int64_t n = rp.buffers[size_t(t.writes[0])].elementCount();
      f.batch_staging += align256((2 * n + 2) * 4);
    }
    if (t.op == OpKind::GradNorm || t.op == OpKind::AdamW) {
      int64_t chunks = 0;
      if (t.op == OpKind::GradNorm && t.attrs.shards == 0 && t.attrs.norm_squared)
        // Each parameter's gradient on its own (weighted by its copies).
        for (int pi : t.attrs.params)
          chunks += chunksOf(rp.buffers[size_t(rp.params.at(size_t(pi)).grad)].elementCount());
      else if (t.op == OpKind::GradNorm)
        for (int b : t.reads) {
          chunks += chunksOf(rp.buffers[size_t(b)].elementCount());
          // A gradient shard is read by its parameters' segments, each
          // rounding its chunks up (at most one more each).
          if (const GradBucket* bucket = bucketOfGradientShard(rp, b)) chunks += int64_t(bucket->params.size());
          // A bucket's shard with replicated parameters (tensor parallelism's
          // norms) is read by their segments too; counted for every bucket
          // of the buffer, a few floats more than the executor may need.
          for (const GradBucket& bucket : rp.buckets)
            if (bucket.buffer == b) chunks += int64_t(bucket.params.size());
        }
      const int64_t slots = int64_t(std::max(t.reads.size(), t.attrs.params.size()));
      f.optimizer_tables += align256(slots * kTensorSlotBytes) + align256(chunks * kFloat);
    }
  }
  return f;
}

int64_t runOverheadBytes(const Plan& plan) { return executorFootprint(plan).total() + kRunReserveBytes; }

int64_t runBytes(const RankPlan& program) {
  return program.memory.arena_bytes + executorFootprint(program).total() + kRunReserveBytes;
}

}  // namespace tandem::gpu_footprint
