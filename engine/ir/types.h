#pragma once
// Small vocabulary types shared by the graph IR, the Plan and everything that
// reads a Plan (executors, simulator, GUI). Each enum has a stable lower-case
// spelling used in JSON and YAML; toString/parse pairs live in types.cpp.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vocabulary/kinds.h"  // Phase, StreamKind: shared with the trace store

namespace tandem {

// F8: an FP8 operand of a GEMM (E4M3 in the forward, E5M2 for gradients in
// Transformer Engine's hybrid recipe; one byte either way), planned and
// simulated, not run (training.precision fp8).
// U8: bytes that are not numbers to compute with (dropout masks).
enum class DType { F32, BF16, I32, F8, U8 };
int64_t dtypeSize(DType t);

// What a tensor is for; the memory plan reports its peak per category.
enum class TensorCategory {
  Parameter,       // weights used by the forward (bf16 copy in bf16 jobs)
  MasterWeight,    // fp32 master copy (bf16 jobs only)
  Gradient,        // parameter gradients (bucketed, all-reduced)
  OptimizerState,  // AdamW first and second moments
  Activation,      // forward activations and their gradients
  Input,           // token ids and targets of a micro-batch
  Workspace,       // scratch for kernels and reductions
};

// Attention: Megatron-LM's selective recompute (Korthikanti et al. 2022),
// the attention core's outputs dropped and the attention re-run from the
// kept QKV before its backward (engine/passes/recompute.h). AlternateGemms:
// torchtitan's per-op selective checkpointing, every other GEMM's output
// and the attention's kept, the rest recomputed.
enum class RecomputePolicy { None, Selective, Full, Attention, AlternateGemms };

// FP8: bf16 training whose transformer blocks' GEMMs read FP8 copies of
// their operands (engine/passes/fp8_gemms.h); fp32 master weights.
enum class Precision { FP32, BF16, FP8 };

enum class TaskKind { Kernel, Collective, SendRecv, Memcpy, Host };

// Fusion of two tasks into one kernel (pass_fusion.h): a GELU forward or
// backward done in the epilogue of the GEMM before it, or a layernorm done
// by the kernel of the residual add before it.
enum class Epilogue { None, Gelu, DGelu, AddLayerNorm, Residual };

// Every operation a Plan task can carry. Forward ops, their backward rules and
// the optimizer and communication ops. The CPU executor, the CUDA executor and
// the cost model each dispatch on this.
enum class OpKind {
  Embedding,          // tokens, wte, wpe -> x                 (GPT-2 token + position)
  EmbeddingBwd,       // dx, tokens -> dwte, dwpe
  LayerNorm,          // x, w, b -> y, mean, rstd
  LayerNormBwd,       // dy, x, w, mean, rstd -> dx (+=), dw, db
  Matmul,             // x[M,K], W[N,K], bias[N] -> y[M,N]     y = x W^T + b
  MatmulBwdData,      // dy[M,N], W[N,K] -> dx[M,K]
  MatmulBwdWeight,    // dy[M,N], x[M,K] -> dW[N,K], db[N]
  Attention,          // qkv[B,T,3C] -> out[B,T,C], lse[B,H,T] (causal, no TxT kept)
  AttentionBwd,       // dout, qkv, out, lse -> dqkv
  Gelu,               // x -> y (tanh approximation, as GPT-2)
  GeluBwd,            // dy, x -> dx
  Add,                // a, b -> c
  CrossEntropy,       // logits[M,V], targets -> losses[M]
  CrossEntropyBwd,    // logits, targets -> dlogits (in place over logits)
  LoadBatch,          // host -> tokens, targets of one micro-batch
  AllReduce,          // gradient bucket, averaged over the group (or a scalar, summed)
  ReduceScatter,      // gradient bucket -> this rank's shard of it, averaged (in place)
  AllGather,          // this rank's shard of a parameter bucket -> every rank (in place)
  GradNorm,           // all gradients -> global L2 norm (one float)
  AdamW,              // grads, norm, master, m, v -> params, master, m, v
  CrossEntropyStats,  // logits[M, V/p], targets -> stats[M, 3] (vocabulary split over p ranks: max, sum exp, target logit)
  RmsNorm,            // x, w -> y, rstd                       (Llama: y = x / rms(x) * w)
  RmsNormBwd,         // dy, x, w, rstd -> dx (+=), dw
  SwiGlu,             // x[M, 2F] (gate | up) -> y[M, F]       y = silu(gate) * up
  SwiGluBwd,          // dy, x -> dx[M, 2F]
  SquaredRelu,        // x -> y                                 y = relu(x)^2 (Nemotron-4's MLP)
  SquaredReluBwd,     // dy, x -> dx
  PackKv,             // qkv[B,T,W] -> kv[B,T,2,KV*D]           (context parallelism: the keys and values to gather)
  PackKvBwd,          // dkv -> dqkv (+=; the key and value columns)
  CastFp8,            // x (bf16) -> x8 (f8)                    (scaled by the tensor's amax: training.precision fp8)
  Send,               // buffer -> the peer of a two-rank group (pipeline stages)
  Recv,               // the peer's buffer -> buffer (keep last: simulator/cost/cost_model.h counts the kinds by it)
};

std::string_view toString(DType v);
std::string_view toString(TensorCategory v);
std::string_view toString(RecomputePolicy v);
std::string_view toString(Precision v);
std::string_view toString(TaskKind v);
std::string_view toString(OpKind v);
std::string_view toString(Epilogue v);

std::optional<DType> parseDType(std::string_view s);
std::optional<TensorCategory> parseTensorCategory(std::string_view s);
std::optional<RecomputePolicy> parseRecomputePolicy(std::string_view s);
// Every recompute policy's spelling, in the enum's order (for menus and
// messages that list them).
std::vector<std::string_view> recomputePolicyNames();
std::optional<Precision> parsePrecision(std::string_view s);
std::optional<TaskKind> parseTaskKind(std::string_view s);
std::optional<OpKind> parseOpKind(std::string_view s);
std::optional<Epilogue> parseEpilogue(std::string_view s);

}  // namespace tandem
