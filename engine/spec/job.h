#pragma once
// The job spec: what the user asks tandem to train, read from YAML
// (resources/jobs/*.yaml documents every field). Validation errors name the
// file, line, field and the allowed values, and are thrown as SpecError.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/ir/types.h"

namespace tandem {

class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ModelFamily { GPT2, Llama };
// The Llama family's MLP: SwiGLU (Llama: silu(gate) x up, a gated input
// layer twice as wide), or an ungated input layer and relu(x)^2
// (Nemotron-4's squared ReLU).
enum class MlpActivation { SwiGlu, SquaredRelu };

// The attention kernel a framework runs (schedule.attention_kernel): Fused,
// a kernel written for the GPU it runs on (tandem's, cuDNN's, FlashAttention
// 3 on Hopper); Flash2, FlashAttention-2, which PyTorch's
// scaled_dot_product_attention runs on Hopper unless it prefers cuDNN
// (before torch 2.10 with cuDNN 9.15): Ampere's tensor-core instructions,
// about half the Hopper kernels' forward rate there and 60% of their
// backward's (simulator/cost/framework_kernels.h).
enum class AttentionKernel { Fused, Flash2 };

// How the elementwise work around the GEMMs runs (schedule.elementwise):
// Fused, one kernel per op (tandem's executors, torch.compile, Megatron's
// and Transformer Engine's fused kernels); Eager, as eager PyTorch runs a
// model's Python: each step of the RMSNorm, the SwiGLU, the rotary
// embedding and the loss its own kernel and its own pass over memory, in
// fp32 where the model code upcasts, and no epilogue fusion.
enum class ElementwiseKernels { Fused, Eager };

// How a framework runs a block's input projections (schedule.projections):
// Fused, one GEMM for query, key and value and one for the gated MLP's gate
// and up halves (tandem, Megatron-LM, Hugging Face's GPT-2); Separate, a
// GEMM each (torchtitan's and Hugging Face's Llama code: wq, wk, wv and w1,
// w3). Separate GEMMs are smaller, and torchtitan's per-op selective
// recompute (recompute.policy alternate_gemms) reruns every second of them,
// the key and up projections among them.
enum class Projections { Fused, Separate };

struct ModelSpec {
  ModelFamily family = ModelFamily::GPT2;
  int vocab = 50304;
  int seq_len = 1024;
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  int kv_heads = 0;        // 0 = same as heads; fewer: Llama's grouped-query attention
  double mlp_ratio = 4.0;
  bool tied_embeddings = true;
  MlpActivation mlp_activation = MlpActivation::SwiGlu;  // Llama family only
  // Dropout on the attention probabilities (Megatron-LM's
  // --attention-dropout, GPT-2's attn_pdrop): each kept probability scaled
  // by 1 / (1 - p), the mask kept for the backward. Planned with the
  // materialized attention (schedule.materialized_attention) only.
  double attention_dropout = 0;
  bool operator==(const ModelSpec&) const = default;

  int headDim() const { return hidden / heads; }
  int mlpHidden() const { return static_cast<int>(hidden * mlp_ratio + 0.5); }
};

// How FP8 GEMM inputs get their scales (training.fp8_scaling, with
// precision fp8): Delayed, from an amax history of earlier steps
// (Transformer Engine's DelayedScaling): the producing norm or activation
// kernel writes its output in FP8 directly; Current, from the tensor's own
// amax in this step (Transformer Engine's Float8CurrentScaling,
// Megatron-Bridge's FP8-CS, torchao's tensorwise dynamic scaling): the
// producer writes bf16, a pass finds the amax, and a cast writes the FP8
// copy in both layouts Hopper's FP8 GEMMs need (row- and column-major, for
// the gradient GEMMs).
enum class Fp8Scaling { Delayed, Current };

struct TrainingSpec {
  int micro_batch = 16;
  int grad_accum = 1;
  int steps = 10;
  double lr = 6e-4;
  double min_lr = 6e-5;
  int warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  Precision precision = Precision::BF16;
  Fp8Scaling fp8_scaling = Fp8Scaling::Delayed;
  // With precision fp8: the first and the last this many blocks keep their
  // GEMMs in bf16 (Megatron's num_layers_at_start_in_bf16 / _at_end_in_bf16;
  // Megatron-Bridge's FP8 current-scaling recipe keeps one of each).
  int fp8_bf16_first_layers = 0;
  int fp8_bf16_last_layers = 0;
  // With precision fp8 and delayed scaling: the grouped attention's
  // backward (the Llama family, heads 64 or 128 wide) writes its q, k and v
  // gradient as FP8 codes itself, in both layouts, instead of bf16 that the
  // QKV projection's backward casts (as Transformer Engine does, its
  // attention in bf16). Off by default: on one H100 the epilogue's FP8
  // stores cost the attention what the cast cost (docs/benchmarks.md).
  bool fp8_attention_grad = false;
  // With precision fp8: the data-parallel all-gathers of parameters (ZeRO-3's
  // before each use, the sharded optimizer's after the update) move the FP8
  // GEMMs' weights as FP8 codes (Megatron's fp8_param_gather, which
  // Megatron-Bridge's FP8 recipes set); ZeRO-3's GEMMs read the gathered
  // codes with no cast of their own (engine/passes/fp8_gemms.cpp). Planned
  // and simulated; the executors refuse it (they gather bf16).
  bool fp8_param_gather = false;
  uint64_t seed = 1337;
  bool operator==(const TrainingSpec&) const = default;
};

struct ParallelSpec {
  int data_parallel = 1;
  // Tensor parallelism (Megatron's column and row split of each block's
  // linear layers): the attention heads and the MLP's hidden units of every
  // block are split over this many ranks, which all-reduce the block's two
  // output projections in the forward and the gradients of its two
  // LayerNorm outputs in the backward (engine/passes/tensor_parallel.h). The
  // embedding and the LM head are split by vocabulary; the LayerNorms stay
  // whole on every rank. The world is data_parallel x tensor_parallel
  // ranks, the tensor-parallel groups blocks of consecutive ranks (a host's
  // GPUs).
  int tensor_parallel = 1;
  // Sequence parallelism (Korthikanti et al., "Reducing Activation
  // Recomputation in Large Transformer Models"), with tensor_parallel > 1:
  // between the tensor-parallel regions each rank holds 1/tensor_parallel
  // of the micro-batch's tokens (the residual stream, the LayerNorms), so
  // those activations shrink by the group size. The all-reduces become a
  // reduce-scatter after each row-parallel layer and an all-gather before
  // each column-parallel one; the LayerNorms' parameter gradients are
  // summed over the group (engine/passes/tensor_parallel.h).
  bool sequence_parallel = false;
  // Context parallelism (Llama 3's all-gather form; Megatron-LM's
  // context_parallel_size): each sample's sequence is split over this many
  // ranks, each holding two of 2 x context_parallel equal chunks (chunk i
  // and its mirror 2 x context_parallel - 1 - i, so every rank does the same
  // share of the causal attention's work). Every per-token layer runs on the
  // rank's tokens; the attention gathers the keys and values of the whole
  // sequence over the group and reduce-scatters their gradients back
  // (engine/ir/model.cpp). The group's ranks see the same samples and
  // average their gradients with the data-parallel replicas, so the world is
  // data_parallel x context_parallel x tensor_parallel x pipeline_parallel
  // ranks and the groups' order is Megatron's: tensor-parallel place
  // fastest, then the context-parallel place, the sample replica and the
  // pipeline stage.
  int context_parallel = 1;
  // Pipeline parallelism: the blocks split into this many stages of
  // consecutive layers (the embedding on the first, the final LayerNorm,
  // LM head and loss on the last), each stage on its own ranks, which pass
  // each micro-batch's activations forward and their gradients back
  // (send/receive) in the one-forward-one-backward order
  // (engine/passes/pipeline.h). The world is data_parallel x tensor_parallel
  // x pipeline_parallel ranks, the stage slowest in the numbering.
  int pipeline_parallel = 1;
  // Interleaved 1F1B (Megatron-LM's virtual pipeline stages): each stage
  // holds this many chunks of consecutive blocks, the model's
  // pipeline_parallel x pipeline_chunks chunks dealt round-robin (stage s
  // holds chunks s, s + p, s + 2p, ...), so a micro-batch passes every
  // stage pipeline_chunks times and the pipeline bubble shrinks by that
  // factor, for more transfers and more micro-batches in flight. 1: the
  // plain 1F1B schedule. Needs grad_accum divisible by pipeline_parallel.
  int pipeline_chunks = 1;
  // Blocks per stage, first stage first (summing to model.layers); empty:
  // an even split. The first stage also runs the embedding and the last
  // the LM head and the loss, so giving those stages fewer blocks evens
  // the stages' work. With pipeline_chunks > 1, blocks per chunk in the
  // model's order (pipeline_parallel x pipeline_chunks counts).
  std::vector<int> pipeline_layers;
  // ZeRO stage 1: each data-parallel rank keeps the optimizer's work for
  // 1/data_parallel of every gradient bucket (reduce-scatter, AdamW on the
  // shard, all-gather of the updated parameters) instead of all-reducing
  // whole buckets and updating every parameter on every rank.
  bool shard_optimizer = false;
  // ZeRO stage 2 (FSDP's SHARD_GRAD_OP): the sharded optimizer, and the
  // gradients kept as shards too: a bucket's whole gradient lives from its
  // first contribution to its reduce-scatter, which writes this rank's
  // average into a shard the norm and the optimizer read; the parameters
  // stay whole on every rank. Implies the sharded optimizer. Planned for
  // one rank too (one shard), as shard_parameters is.
  bool shard_gradients = false;
  // ZeRO stage 3 / FSDP full sharding of the parameters as well: each rank
  // keeps only its shard of every bucket's parameters between uses; each
  // bucket is all-gathered into a temporary buffer before its forward use
  // in a micro-batch and again before its backward use, and the optimizer
  // writes the updated shard (engine/passes/shard_parameters.h). Implies the
  // sharded optimizer.
  bool shard_parameters = false;
  // Hybrid sharding (FSDP's HYBRID_SHARD): with shard_parameters, shard
  // within groups of this many consecutive ranks (a host's GPUs, say) and
  // replicate across the groups, whose gradient shards are all-reduced.
  // 0: one group of every rank.
  int shard_group_size = 0;
  bool operator==(const ParallelSpec&) const = default;
};

struct CommSpec {
  double bucket_mib = 25.0;
  double first_bucket_mib = 1.0;
  // With the optimizer sharded and tied embeddings: reduce-scatter the
  // embedding's bucket once the LM head's gradient is in it, and apply the
  // embedding backward to each rank's shard from an all-gather of its input
  // gradient (engine/passes/embedding_gather.h).
  // Off by default: on two H200s (GPT-2 124M, micro-batch 16) it measured
  // no faster, the early reduce-scatter slowing the backward beside it.
  bool gather_embedding_gradient = false;
  // With sharded parameters and gradient accumulation: reduce-scatter every
  // micro-batch's gradients into shards that are summed, instead of
  // accumulating whole buckets over the micro-batches and reduce-scattering
  // them once (engine/passes/micro_batch_reduce.h). More communication, and
  // a whole bucket lives for one micro-batch only.
  bool reduce_every_micro_batch = false;
  // Pipeline stages with tensor parallelism but no sequence parallelism:
  // each rank of a tensor-parallel group sends and receives only its
  // 1/tensor_parallel of the activations (or their gradient) across a stage
  // boundary, and the receiving group all-gathers them over its fast links
  // (Megatron-LM's scatter/gather optimization, on by default there;
  // engine/passes/pipeline_scatter_gather.h).
  bool pipeline_scatter_gather = false;
  // Jobs whose gradients are bf16: their reductions across ranks (data
  // parallel all-reduces and reduce-scatters, sums across replicas and
  // stages) move fp32, twice the bytes (PyTorch FSDP2's reduce_dtype
  // float32, torchtitan's default; Megatron's grad_reduce_in_fp32).
  // Planned and simulated; the executors refuse it (they reduce bf16).
  bool grad_reduce_fp32 = false;
  bool operator==(const CommSpec&) const = default;
};

// How the planner orders work on a rank's streams.
struct ScheduleSpec {
  // Weight-gradient GEMMs (and their bias gradients) on a second compute
  // stream beside the data-gradient chain of the backward, which they are
  // off the critical path of (engine/plan/lower.h). One H200, GPT-2 124M
  // micro-batch 16: about 0.6 ms faster per step (docs/benchmarks.md).
  bool weight_gradient_stream = true;
  // The bias gradients of the attention and MLP output projections summed
  // by the layernorm backward that adds their output gradient to the
  // residual gradient, and the QKV projection's by the attention backward
  // that writes its output gradient (engine/passes/bias_grad.h): no separate
  // pass over those gradients. Off by default: on one H200 (GPT-2 124M,
  // micro-batch 16) it saved 0.43 ms of kernel time but no step time, the
  // passes it removes having run hidden on the weight-gradient stream
  // (docs/benchmarks.md).
  bool fuse_bias_gradients = false;
  // AdamW moved to the start of the next step, on a compute stream of its
  // own beside the forward, each bucket's update before the first forward
  // use of its parameters (engine/passes/buckets.h): memory-bound updates
  // beside compute-bound GEMMs instead of alone at the end. A run's first
  // step has nothing to apply; the executors' finishOptimizer() applies the
  // last step's update. The same arithmetic, in the same order per bucket.
  // Unsharded optimizers only (a sharded one keeps its updates at the end,
  // where its all-gathers are planned; a job asking for both is refused).
  bool optimizer_beside_forward = false;
  // The residual add after an output projection done by the projection's
  // GEMM (its C operand, beta = 1; engine/passes/fusion.h): the GEMM writes
  // the new residual stream, the add issues nothing, and the layernorm that
  // follows reads the sum alone (no longer fused with the add). One pass
  // over the activations fewer per residual add. One H200, GPT-2 124M,
  // micro-batch 16: 0.07-0.31 ms faster per step in four alternations
  // (docs/benchmarks.md).
  bool residual_in_gemm = true;
  // The LM head (its matmul, the cross-entropy and their gradients) in this
  // many groups of consecutive tokens, group by group (engine/passes/lm_head_chunks.h):
  // each group's logits are a buffer of their own, so only a few groups'
  // logits are live at once instead of the whole [tokens, vocab], and each
  // group's weight-gradient GEMM runs beside the next group's matmul and
  // memory-bound cross-entropy. 1 keeps one group. The tokens of a
  // micro-batch must split evenly into groups of a multiple of 8.
  int lm_head_chunks = 1;
  // With sharded parameters: how many gathered copies ahead of the compute
  // the comm stream may run (engine/passes/shard_parameters.h). 1 gathers the
  // next bucket while the current one is in use; more hides more of a slow
  // network for that many more buckets' memory.
  int gather_ahead = 1;
  // The attention as frameworks without a fused kernel run it (Megatron-LM
  // of 2021-22, eager PyTorch): Q K^T as a batched GEMM into a [B, H, T, T]
  // score matrix, a scale-mask-softmax pass, the probabilities times V, and
  // the probabilities kept for the backward instead of each row's
  // log-sum-exp. The same arithmetic; the full T x T products (the mask is
  // applied after them) and passes over B H T^2 elements that the fused
  // kernel does not make, and their memory. For what-if studies of such
  // frameworks; the GPU executor runs the fused kernel only.
  bool materialized_attention = false;
  // With sequence parallelism: each tensor-parallel all-gather and
  // reduce-scatter pipelined with the GEMM beside it, on a communication
  // stream of its own (engine/passes/tp_comm_overlap.h; Megatron-LM and
  // NeMo's tp_comm_overlap). The same arithmetic; the simulator runs each
  // pair about as long as the longer of the two.
  bool tp_comm_overlap = false;
  // What-if choices of another framework's kernels (see the enums): the
  // same arithmetic, other kernels' time. The GPU executor runs its own.
  AttentionKernel attention_kernel = AttentionKernel::Fused;
  ElementwiseKernels elementwise = ElementwiseKernels::Fused;
  Projections projections = Projections::Fused;
  bool operator==(const ScheduleSpec&) const = default;
};

// What full recompute runs again of a block (recompute.rerun): Block, its
// whole forward, every op, as Megatron-LM's checkpoint runs it (PyTorch's
// non-reentrant checkpoint stops after the MLP's output GEMM, the last op
// that saves a tensor);
// Needed, only the ops whose outputs the block's backward reads, which
// leaves out the MLP's output GEMM, its tensor-parallel sum and the
// residual add (tandem's executors can; no framework does).
enum class FullRerun { Block, Needed };

struct RecomputeSpec {
  RecomputePolicy policy = RecomputePolicy::None;
  FullRerun rerun = FullRerun::Block;
  std::map<int, RecomputePolicy> per_layer;  // overrides by layer index
  RecomputePolicy forLayer(int layer) const;
  bool operator==(const RecomputeSpec&) const = default;
};

struct DataSpec {
  std::string source = "synthetic";  // synthetic | tokens
  std::string path;                  // token file (little-endian uint16) for `tokens`
  int markov_order = 2;              // synthetic: tokens depend on this many predecessors
  int branching = 4;                 // synthetic: successors per context
  bool operator==(const DataSpec&) const = default;
};

struct JobSpec {
  std::string name = "job";
  ModelSpec model;
  TrainingSpec training;
  ParallelSpec parallel;
  CommSpec comm;
  ScheduleSpec schedule;
  RecomputeSpec recompute;
  DataSpec data;
  std::string source;        // file the spec came from ("<embedded>" for built-ins)
  std::string yaml;          // the effective spec as YAML (after --set overrides)
  std::string content_hash;  // FNV-1a 64 of `yaml`, hex
  bool operator==(const JobSpec&) const = default;

  int64_t globalBatch() const {
    return int64_t(training.micro_batch) * training.grad_accum * parallel.data_parallel;
  }
  int64_t tokensPerStep() const { return globalBatch() * model.seq_len; }
  // The tokens of each sample one rank holds (the whole sequence without
  // context parallelism).
  int64_t rankSeqLen() const { return model.seq_len / parallel.context_parallel; }
  // The replicas of each stage and tensor-parallel place: the ranks that
  // average their gradients (and shard the optimizer), data_parallel sample
  // replicas of context_parallel ranks each.
  int replicas() const { return parallel.data_parallel * parallel.context_parallel; }
  // Ranks of the job: each replica is tensor_parallel ranks in each of
  // pipeline_parallel stages.
  int worldSize() const { return replicas() * parallel.tensor_parallel * parallel.pipeline_parallel; }
  // Where a rank sits: rank = (stage x replicas() + replica) x
  // tensor_parallel + place (the tensor-parallel place fastest, so a
  // tensor-parallel group is consecutive ranks; a stage is a block of
  // replicas() x tensor_parallel ranks), and replica = sample replica x
  // context_parallel + context-parallel place.
  int tensorParallelPlace(int rank) const { return rank % parallel.tensor_parallel; }
  int dataParallelRank(int rank) const { return (rank / parallel.tensor_parallel) % replicas(); }
  int contextParallelPlace(int rank) const { return dataParallelRank(rank) % parallel.context_parallel; }
  int sampleReplica(int rank) const { return dataParallelRank(rank) / parallel.context_parallel; }
  int pipelineStage(int rank) const { return rank / (parallel.tensor_parallel * replicas()); }
  int rankAt(int stage, int replica, int place) const {
    return (stage * replicas() + replica) * parallel.tensor_parallel + place;
  }
};

// Context parallelism's layout: the position in the whole sequence of the
// rank's token `t` (of `local` = seq_len / context_parallel), for the rank
// at context-parallel `place` of `context_parallel`: its first half is
// chunk `place`, its second the mirror chunk 2 x context_parallel - 1 -
// place (ParallelSpec::context_parallel).
inline int64_t contextParallelPosition(int64_t t, int64_t local, int place, int context_parallel) {
  const int64_t chunk = local / 2;
  if (t < chunk) return int64_t(place) * chunk + t;
  return int64_t(2 * context_parallel - 1 - place) * chunk + (t - chunk);
}

// Parses and validates a job. `overrides` are "dotted.key=value" pairs applied
// before validation (the CLI's --set). Throws SpecError with
// "FILE:LINE: FIELD: problem (allowed: ...)".
JobSpec parseJob(const std::string& yaml_text, const std::string& source_name,
                 const std::vector<std::string>& overrides = {});
JobSpec loadJobFile(const std::string& path, const std::vector<std::string>& overrides = {});

// Checks that touch the file system. A plan read on another machine re-parses
// its embedded job without them (the token file may live elsewhere there).
struct JobParseOptions {
  bool check_files = true;  // data.path must exist for source `tokens`
  // The job is the mapping under this top-level key of a larger file (a
  // published row's `job:`, whose other keys its reader checks); errors name
  // the file's own lines. Empty: the whole file is the job.
  std::string section;
};
JobSpec parseJob(const std::string& yaml_text, const std::string& source_name,
                 const std::vector<std::string>& overrides, const JobParseOptions& options);

// The embedded default job (GPT-2 124M, data parallel 8) and the tiny job the
// demo trains on the CPU.
JobSpec defaultJob();
JobSpec tinyJob();

// The job files shipped in resources/jobs/, compiled into the library so the
// binary works without that folder. Names are file names without ".yaml"
// ("gpt2-tiny"); the text is byte for byte the file's. Empty when unknown.
std::vector<std::string> builtinJobNames();
std::string_view builtinJobText(std::string_view name);

// Serializes a job back to YAML (the form stored in plans and traces):
// canonical, every field in a fixed order, so parseJob(jobToYaml(j)) equals j
// (apart from `source`).
std::string jobToYaml(const JobSpec& job);

// Recomputes `yaml` and `content_hash` from the fields. Call it after changing
// a parsed job in code so the text stored in plans and traces stays truthful.
void refreshJobText(JobSpec& job);

std::string_view toString(ModelFamily f);
std::string_view toString(MlpActivation a);
std::string_view toString(AttentionKernel k);
std::string_view toString(FullRerun r);
std::string_view toString(Projections p);
std::string_view toString(Fp8Scaling s);
std::string_view toString(ElementwiseKernels k);

}  // namespace tandem
