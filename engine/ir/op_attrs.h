#pragma once
// Shape and behaviour attributes of one operation. One flat struct for every
// op kind: each kind reads the fields its comment in types.h names. Keeping it
// flat keeps the Plan JSON, the cost model and both executors simple.

#include <cstdint>
#include <vector>

#include "engine/ir/types.h"

namespace tandem {

struct OpAttrs {
  // Matmul family: y[m,n] = x[m,k] * W[n,k]^T (+ bias[n]).
  int64_t m = 0, n = 0, k = 0;
  bool has_bias = false;
  // Sequence ops: batch, time, channels, heads, vocabulary.
  int64_t b = 0, t = 0, c = 0, h = 0, v = 0;
  // Attention: 0 for GPT-2's layout (qkv = [q | k | v], each c wide); n > 0
  // for Llama's: n key/value heads shared by h/n query heads each (grouped
  // query attention), qkv laid out by group, [q of the group's h/n heads,
  // k, v] for each of the n groups, and rotary position embeddings on q and
  // k (engine/cpu/kernels.h, groupedAttentionForward). c is h x head width.
  int64_t kv_heads = 0;
  // Elementwise ops: element count.
  int64_t elements = 0;
  // Gradient outputs add into their destination instead of overwriting it
  // (second and later contributions, micro-batches after the first).
  bool accumulate = false;         // the activation-gradient output (dx)
  bool accumulate_params = false;  // the parameter-gradient outputs (dW, db)
  // LayerNormBwd / AttentionBwd: the task also writes, as its last output,
  // the bias gradient of a linear layer whose output gradient it already
  // touches (engine/passes/bias_grad.h): a LayerNormBwd sums the residual
  // gradient it adds to (its dx before the add), an AttentionBwd its own
  // output. That layer's MatmulBwdWeight then writes dW alone (has_bias off).
  bool bias_grad = false;
  // AdamW: applies the previous step's gradients at the start of this step
  // (schedule.optimizer_beside_forward): skipped on a run's first step, and
  // the executors' finishOptimizer() applies the last step's.
  bool from_previous_step = false;
  // Cross-entropy backward: dloss per token, 1 / (tokens in the global batch).
  double loss_scale = 1.0;
  // Data loading: which micro-batch of the step this is.
  int64_t micro_batch = 0;
  // AdamW / GradNorm: indices into RankPlan::params that the task covers.
  std::vector<int> params;
  // Optimizer sharding (ZeRO-1), on AdamW, GradNorm, ReduceScatter and
  // AllGather: the task covers rank r's part [r, r + 1) * size / shards of
  // each bucket it names; 0 = the whole bucket. A sharded GradNorm writes
  // this rank's sum of squares (a summing all-reduce follows), and a
  // sharded AdamW reads the global sum of squares.
  int64_t shards = 0;
  // Tensor parallelism (engine/passes/tensor_parallel.h), the group size, 0
  // without. On a row-parallel Matmul (a block's output projections, whose
  // input is this rank's slice of k): only the first rank of each
  // tensor-parallel group adds the bias, since the all-reduce after it sums
  // the ranks' partial products. On Embedding, EmbeddingBwd,
  // CrossEntropyStats, CrossEntropy and CrossEntropyBwd: the vocabulary is
  // split, rank r of the group holding rows [r, r + 1) * V / tensor_parallel
  // of the embedding (`v` is the whole vocabulary on the embedding, the
  // rank's part on the others); the embedding adds the position only on
  // the group's first rank, and the loss reads every rank's statistics.
  int64_t tensor_parallel = 0;
  // Context parallelism (ParallelSpec::context_parallel), the group size, 0
  // without; `t` is then the rank's tokens of each sample, its two chunks
  // (contextParallelPosition). On Embedding and EmbeddingBwd the positions
  // are those chunks'. Attention reads a second input, the keys and values
  // of the whole sequence gathered over the group ([cp, B, t, 2, kv x D],
  // PackKv's layout in rank order), and its backward writes their gradient
  // as a second output; each of the rank's queries attends to the keys up
  // to its position in the sequence. PackKv and PackKvBwd carry b, t, c, h
  // and kv_heads as the Attention they serve.
  int64_t context_parallel = 0;
  // Attention and AttentionBwd (schedule.materialized_attention): the
  // forward's second output is the probabilities [B, H, T, T] (zero above
  // the diagonal) instead of lse, and the backward reads them; the kernels
  // are a batched GEMM, a softmax pass and a second GEMM each way
  // (simulator: one roofline per kernel, summed).
  bool materialized = false;
  // Materialized Attention and AttentionBwd (model.attention_dropout): the
  // probability of dropping each attention probability. The forward also
  // writes the dropped probabilities (kept ones scaled by 1 / (1 - p), what
  // multiplies V) and the mask (u8, 1 = kept), drawn from the step, the
  // rank, the task's layer and micro-batch and the element's position, so a
  // recomputed forward draws the same; the backward reads both.
  double dropout = 0;
  // A tensor-parallel all-gather or reduce-scatter pipelined with its GEMM
  // (schedule.tp_comm_overlap, engine/passes/tp_comm_overlap.h): the
  // all-gather's first reader, or the reduce-scatter's input's writer, runs
  // beside it; a reduce-scatter's reads after the first are that GEMM's
  // inputs (ordering only).
  bool overlapped = false;
  // Matmul family (training.precision fp8): the GEMM reads FP8 copies of
  // its two operands (CastFp8's outputs, or a producer's FP8 output) and
  // runs at the GPU's FP8 rate (engine/passes/fp8_gemms.h).
  bool fp8 = false;
  // FP8 GEMMs whose operand must be K-major where it was stored row-major
  // (Hopper's FP8 tensor cores read both operands K-major: the weight of
  // MatmulBwdData, dy and x of MatmulBwdWeight): bit i set when slot i
  // reads the transposed copy its CastFp8 wrote beside the row-major one
  // (fp8TransposedSlot) or its producer wrote (fp8_transposed_out). Unset
  // for such a slot: the executor transposes the operand itself (an FP8
  // tensor written by a LayerNorm or a gather).
  int fp8_transposed = 0;
  // Under delayed scaling, a norm or activation writing its first output
  // as FP8 codes itself (engine/passes/fp8_gemms.h): another kernel than
  // its bf16 twin of the same shape, so the simulator keys its shapes apart
  // (as `fp8` does a GEMM's). Not set on CastFp8, an op kind of its own.
  bool fp8_out = false;
  // A task writing an FP8 GEMM operand (a CastFp8, or under delayed scaling
  // an elementwise activation or RMSNorm writing FP8) whose last output is the
  // transposed copy of its first ([columns, rows]: the last dimension
  // first), the K-major layout a backward FP8 GEMM reads, written with the
  // same codes and scale (engine/passes/fp8_gemms.h).
  bool fp8_transposed_out = false;
  // CastFp8 (training.fp8_scaling current): the scale comes from the
  // tensor's own amax, a pass of its own before the cast (the input read
  // twice).
  bool current_scaling = false;
  // CastFp8, current scaling: the kernel that wrote the cast's input (an
  // elementwise kernel writing all of it: SwiGLU's forward or backward) also
  // took its amax, so the cast reads its input once (the executors and the
  // cost model; engine/passes/fp8_gemms.h).
  bool amax_by_writer = false;
  // GradNorm: the task writes this rank's share of the sum of squares (its
  // shard's part with a sharded optimizer, each gradient counted
  // 1/ParamInfo::copies), and summing all-reduces over the rank's groups
  // follow; AdamW: the norm buffer holds the global sum of squares, whose
  // root it takes. Sharded plans (shards > 0) are read so without it too.
  bool norm_squared = false;
  // Another framework's kernels for the same arithmetic (what-if studies;
  // engine/passes/framework_kernels.h): `flash2` on Attention and
  // AttentionBwd (schedule.attention_kernel flash2), `eager` on the
  // elementwise ops eager PyTorch runs as chains of kernels
  // (schedule.elementwise eager). The simulator times them so; both
  // executors compute the same results.
  bool flash2 = false;
  bool eager = false;
  // Matmul family (schedule.projections separate): the widths, parts of n,
  // of the separate GEMMs the framework runs in place of this fused one
  // (torchtitan's q, k and v projections; its gate and up). The simulator
  // times one GEMM per part, summed; the executors run the fused GEMM,
  // which computes the same. Empty: one GEMM.
  std::vector<int64_t> parts;

  bool operator==(const OpAttrs&) const = default;
};

// Whether an FP8 GEMM of kind `op` reads its operand in `slot` K-major where
// the tensor is stored row-major: MatmulBwdData's weight [n, k] (contracted
// over n), MatmulBwdWeight's dy [m, n] and x [m, k] (over m).
inline bool fp8TransposedSlot(OpKind op, int slot) {
  return (op == OpKind::MatmulBwdData && slot == 1) || (op == OpKind::MatmulBwdWeight && (slot == 0 || slot == 1));
}

}  // namespace tandem
