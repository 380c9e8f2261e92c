#pragma once
// Launchers of the executor's own kernels. Row-major layouts and the exact
// math of engine/cpu/kernels.h (the reference); activations are bf16 or fp32
// (`dt`), reductions accumulate in fp32 and are deterministic: no floating
// point atomics, so a CUDA Graph replay and an eager step give the same bits
// (FP8 delayed scaling's amax is an integer atomic max of non-negative
// floats' bits: the same whatever the order, fp8_write.cuh).
//
// Side tensors (layernorm mean/rstd, attention lse, per-token losses) take
// their own dtype because the planner may store them in fp32 or bf16.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/ir/types.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/numerics/fp8.h"

namespace tandem::cuda {

// Scratch sizes and multi-tensor chunks live with the executor's footprint,
// which a build without CUDA computes too (engine/memory/gpu_footprint.h).
using gpu_footprint::attentionScratchBytes;
using gpu_footprint::biasGradientScratchBytes;
using gpu_footprint::crossEntropyScratchBytes;
using gpu_footprint::groupedAttentionScratchBytes;
using gpu_footprint::kChunkElements;
using gpu_footprint::layernormScratchBytes;
using gpu_footprint::rmsnormScratchBytes;

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe may be null: no position table)
void embeddingForward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                      int64_t B, int64_t Tn, int64_t C, DType dt, cudaStream_t s);

// Token order of one micro-batch, sorted by token id (then position), built
// on the host when the batch is loaded. Lets the embedding backward sum each
// vocabulary row in a fixed order without atomics.
struct TokenIndex {
  const int32_t* order = nullptr;      // [B*Tn] positions sorted by token
  const int32_t* seg_start = nullptr;  // [B*Tn + 1] start of each distinct token's run
  const int32_t* seg_count = nullptr;  // [1] number of distinct tokens
};
// dwte[v,:] (+)= sum of dout rows whose token is v; dwpe[t,:] (+)= sum_b dout[b,t,:].
// The two outputs have their own flags (a tied wte may already hold the LM
// head's contribution while wpe is written fresh); without accumulate_wte the
// rows of dwte that no token touches are zeroed. dwpe may be null (no
// position table).
void embeddingBackward(void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                       const TokenIndex& index, int64_t B, int64_t Tn, int64_t C, int64_t V,
                       bool accumulate_wte, bool accumulate_wpe, DType dt, cudaStream_t s);
// The embedding backward over every rank's input gradient (engine/
// pass_embedding_gather.h): dout is [ranks * B * Tn, C] in rank order,
// `tokens` and `index` cover the same ranks * B * Tn positions. Only the
// elements of the bucket `bucket` in [shard_begin, shard_end) change: dwte
// (at element wte_at of the bucket) gains 1/ranks of every row of its
// tokens, dwpe (at wpe_at) becomes (or, accumulating, gains) 1/ranks of the
// sum over every rank's batch.
void embeddingBackwardGathered(void* bucket, int64_t wte_at, int64_t wpe_at, int64_t shard_begin,
                               int64_t shard_end, const void* dout, const int32_t* tokens,
                               const TokenIndex& index, int ranks, int64_t B, int64_t Tn, int64_t C,
                               bool accumulate_wpe, DType dt, cudaStream_t s);

void layernormForward(void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt,
                      const void* x, const void* w, const void* b, int64_t M, int64_t C,
                      DType dt, cudaStream_t s);
// sum = a + a2 (rounded to dt, as addForward writes it), then y = the
// layernorm of sum: the residual add and the layernorm after it in one
// kernel (the plan's add+layernorm fusion, engine/passes/fusion.h). Bit for
// bit the same as addForward then layernormForward.
void addLayernormForward(void* sum, void* y, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* a,
                         const void* a2, const void* w, const void* b, int64_t M, int64_t C, DType dt,
                         cudaStream_t s);
// scratch: layernormScratchBytes(C, dbias != null) bytes of executor workspace.
// The layernorm backward's dx alone, its rows spread over every warp (no
// parameter sums, which pin the row to a fixed set of warps): what moving
// the sums off the critical path would leave there. Rows of up to 3
// vectors per lane (bf16 768 wide). For bench_layernorm_bwd.
void layernormBackwardDataOnly(void* dx, const void* dy, const void* x, const void* w, const void* mean,
                               DType mean_dt, const void* rstd, DType rstd_dt, int64_t M, int64_t C,
                               bool accumulate_dx, DType dt, cudaStream_t s);
// Raises the shared-memory limit of the wide-row layernorm backward (part of prepareKernels).
void prepareLayernormKernels();
// Raises the shared-memory limit of RMSNorm's one-read FP8 writer (part of prepareKernels).
void prepareRmsnormKernels();
// dbias (may be null): also the column sums of dx's contents before the add,
// the bias gradient of the layer whose output gradient dx holds
// (engine/passes/bias_grad.h); needs accumulate_dx, accumulates with accumulate_dw.
void layernormBackward(void* dx, void* dw, void* db, void* dbias, const void* dy, const void* x, const void* w,
                       const void* mean, DType mean_dt, const void* rstd, DType rstd_dt,
                       int64_t M, int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt,
                       float* scratch, cudaStream_t s);

// Raises the shared-memory limits of the tensor-core kernels on the current
// device. Call once per device before the first launch (outside a capture).
void prepareKernels();
// The instructions the bf16 head-dimension-64 attention kernels use on this
// device, "wgmma" (sm_90a) or "mma.sync", as prepareKernels chose them
// (TANDEM_ATTN_MMA=wgmma|sync overrides).
const char* attentionMmaPath();

// Causal attention; head dimension C/H 16, 32 or 64, or 128 in bf16 where
// the tensor-core kernels have their Hopper code
// (gpuAttentionHeadWidthSupported, engine/plan/gpu_support.h). bf16 with head
// dimension 64 or 128 runs on the tensor cores (attention_tc.cu), the rest
// on a fp32 CUDA-core kernel (attention.cu). attentionRunsHere: whether this
// device (after prepareKernels) runs the shape.
bool attentionRunsHere(int64_t C, int64_t H, DType dt);
void attentionForward(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn,
                      int64_t C, int64_t H, DType dt, cudaStream_t s);
// scratch: attentionScratchBytes(B, Tn, H, C, dbias != null) bytes of executor workspace.
// dbias (may be null): also the column sums of dqkv, the QKV projection's
// bias gradient (engine/passes/bias_grad.h); needs accumulate off, adds to
// dbias with accumulate_bias.
void attentionBackward(void* dqkv, void* dbias, const void* dout, const void* qkv, const void* out,
                       const void* lse, DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H,
                       bool accumulate, bool accumulate_bias, DType dt, float* scratch, cudaStream_t s);

// The Llama family (llama.cu), the math of engine/cpu/kernels_llama.cpp.
// y = x / sqrt(mean(x^2) + 1e-5) * w over rows of C; rstd[M] in rstd_dt.
void rmsnormForward(void* y, void* rstd, DType rstd_dt, const void* x, const void* w, int64_t M, int64_t C, DType dt,
                    cudaStream_t s);
// scratch: rmsnormScratchBytes(C) bytes (the weight gradient's partial sums).
// dx may alias dy.
void rmsnormBackward(void* dx, void* dw, const void* dy, const void* x, const void* w, const void* rstd,
                     DType rstd_dt, int64_t M, int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt,
                     float* scratch, cudaStream_t s);
// The RMSNorm backward on the layernorm backward's one-pass vector kernel
// (layernorm.cu; rows of up to 8 16-byte vectors per lane, aligned), or
// false when the row does not qualify. scratch: rmsnormScratchBytes(C).
bool rmsnormBackwardFused(void* dx, void* dw, const void* dy, const void* x, const void* w, const void* rstd,
                          DType rstd_dt, int64_t M, int64_t C, bool accumulate_dx, bool accumulate_dw, DType dt,
                          float* scratch, cudaStream_t s);
// x rows [gate | up] of 2F, y rows of F: y = silu(gate) * up. With
// amax_partials (kFp8AmaxBlocks floats): also each block's largest
// magnitude of what it stored (y; dx for the backward, which writes all of
// it), the partial maxima an FP8 cast of the output reads
// (gpu_footprint::fp8AmaxProducers).
void swigluForward(void* y, const void* x, int64_t M, int64_t F, DType dt, cudaStream_t s,
                   float* amax_partials = nullptr);
void swigluBackward(void* dx, const void* dy, const void* x, int64_t M, int64_t F, bool accumulate, DType dt,
                    cudaStream_t s, float* amax_partials = nullptr);
// Grouped-query attention with rotary embeddings: qkv rows hold KV groups of
// [H/KV query heads | k | v]. expandGroupedQkv writes the [q | k | v] layout
// of H heads (q, k rotated) that attentionForward/Backward take;
// foldGroupedQkv turns that layout's gradient back into the grouped one.
void expandGroupedQkv(void* full, const void* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV, DType dt,
                      cudaStream_t s);
void foldGroupedQkv(void* dqkv, const void* dfull, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV,
                    bool accumulate, DType dt, cudaStream_t s);
// bf16 heads 64 or 128 wide: the tensor-core kernels read the grouped
// layout as it is (queries and keys rotated into scratch, V in place; each
// key/value head's dK and dV summed over its group in registers, dQ and dK
// rotated back as stored). Otherwise through the multi-head kernels on the
// expanded copy. scratch: groupedAttentionScratchBytes(B, Tn, H, C, KV,
// element bytes, backward).
void groupedAttentionForward(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn, int64_t C,
                             int64_t H, int64_t KV, DType dt, void* scratch, cudaStream_t s);
void groupedAttentionBackward(void* dqkv, const void* dout, const void* qkv, const void* out, const void* lse,
                              DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV, bool accumulate,
                              DType dt, void* scratch, cudaStream_t s);

void geluForward(void* y, const void* x, int64_t n, DType dt, cudaStream_t s);
void geluBackward(void* dx, const void* dy, const void* x, int64_t n, bool accumulate, DType dt,
                  cudaStream_t s);
void addForward(void* c, const void* a, const void* b, int64_t n, DType dt, cudaStream_t s);

// Fused softmax + cross-entropy. Writes losses[m] (when non-null) and, when
// dlogits is non-null, dlogits = scale * (softmax - onehot) (may alias
// logits). loss_sum (fp32, may be null) receives the sum of the M losses,
// added in a fixed order.
void crossEntropy(void* losses, DType loss_dt, void* dlogits, const void* logits,
                  const int32_t* targets, int64_t M, int64_t V, float scale, DType dt,
                  float* loss_sum, float* scratch, cudaStream_t s);
// Whether crossEntropy takes the streamed kernel for rows of V logits of dt
// (cross_entropy.cu): bf16, V % 8 == 0, two rows fit in shared memory, a
// compute capability 9.0 device, and neither TANDEM_CROSS_ENTROPY=rows nor
// setCrossEntropyStreamed(false). It gives the same bits as the other bf16 kernel.
bool crossEntropyStreams(int64_t V, DType dt);
// Tests and benchmarks: off keeps every call on the one-row-per-block kernel.
void setCrossEntropyStreamed(bool on);
// Raises the streamed kernel's shared-memory limit (part of prepareKernels).
void prepareCrossEntropyKernels();

// db[n] (+)= sum_m dy[m,n]   (the bias gradient of a matmul)
void biasGradient(void* db, const void* dy, int64_t M, int64_t N, bool accumulate, DType dt,
                  float* scratch, cudaStream_t s);
// db[N] (+)= the sums of `rows` rows of fp32 partial sums (row pitch N), in a
// fixed order: the last step of a bias gradient summed inside another kernel.
void biasGradientFromPartials(void* db, const float* partial, int64_t N, int64_t rows, bool accumulate, DType dt,
                              cudaStream_t s);

// One tensor of a multi-tensor launch (grad norm, AdamW). Tables live in
// device memory and are built once per plan.
struct TensorSlot {
  void* param = nullptr;   // bf16 or fp32 copy used by the forward
  float* master = nullptr; // fp32 master (== param in fp32 jobs)
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  int64_t n = 0;
  int64_t chunk_begin = 0;  // first chunk index of this tensor
  float weight_decay = 0;
  int param_bf16 = 0;
  int grad_bf16 = 0;
  // GradNorm: the weight of this tensor's sum of squares (1 / the copies of
  // it that the ranks summing the squares hold: tensor parallelism's
  // replicated norms, engine/plan/plan.h ParamInfo::copies).
  float norm_weight = 1.f;
};
static_assert(sizeof(TensorSlot) == gpu_footprint::kTensorSlotBytes,
              "the executor footprint counts TensorSlot tables by this size");

// Per-step scalars the optimizer reads from device memory, so a captured
// graph picks up the learning rate and step of each replay.
struct StepScalars {
  float lr = 0;
  double bias_correction1 = 1;  // 1 - beta1^t
  double bias_correction2 = 1;  // 1 - beta2^t
  float loss_sum = 0;          // sum of per-token losses of this step (this rank)
  // The previous step's, for the AdamW tasks that apply its gradients at the
  // start of this step (schedule.optimizer_beside_forward); prev_valid 0:
  // nothing to apply (a run's first step), those tasks do nothing.
  float prev_lr = 0;
  double prev_bias_correction1 = 1, prev_bias_correction2 = 1;
  int prev_valid = 0;
};

// Initial parameter values on the device (init_fill.cu): out[i], i < n, is
// element begin + i of a whole parameter under its InitRule
// (engine/numerics/init.h): `constant`, or portable::scaledNormalAt(seed,
// begin + i, stddev), stored as f32 or bf16 (rounded as floatToBf16Bits):
// the bits initialParameterValues gives on the host.
void fillInitialValues(void* out, DType dt, int64_t begin, int64_t n, bool normal, float constant, uint64_t seed,
                       double stddev, cudaStream_t s);

// partials[chunks] = sum of squares per chunk; then norm[0] = sqrt(sum), or
// the sum itself when `squared` (a sharded optimizer sums it over ranks).
void gradNorm(float* norm, const TensorSlot* slots, int num_slots, int64_t num_chunks,
              float* partials, bool squared, cudaStream_t s);
// `norm` is the global gradient norm, or its square when `norm_squared`.
// previous: the update of the previous step's gradients (the scalars' prev_*).
void adamw(const TensorSlot* slots, int num_slots, int64_t num_chunks, const StepScalars* scalars, bool previous,
           const float* norm, bool norm_squared, float grad_clip, float beta1, float beta2, float eps,
           cudaStream_t s);

// FP8 GEMM operands (fp8.cu), current scaling: out[i] = the FP8 code of
// x[i] * scale, scale = largest finite / max |x| (engine/numerics/fp8.h, as
// the CPU reference casts), and *scale_inv = 1 / scale for the GEMM that
// reads the codes (cuBLASLt's A/B scale). amax_partials: kFp8AmaxBlocks
// floats, the partial maxima of |x| when amax_measured (x's writer took
// them), else scratch the cast fills with its own pass over x first.
void fp8CastCurrentScaling(void* out, const void* x, DType dt, int64_t n, Fp8Format format, float* scale_inv,
                           float* amax_partials, bool amax_measured, cudaStream_t s);
// The same cast of x[rows, cols] writing the codes both as stored (out) and
// transposed (out_t[cols, rows], the K-major copy a backward GEMM reads),
// with *scale_inv_t = *scale_inv; the codes are the same. cols a multiple
// of 8, rows of 4.
void fp8CastTransposeCurrentScaling(void* out, void* out_t, const void* x, DType dt, int64_t rows, int64_t cols,
                                    Fp8Format format, float* scale_inv, float* scale_inv_t, float* amax_partials,
                                    bool amax_measured, cudaStream_t s);
// FP8 delayed scaling (training.fp8_scaling delayed; the recipe in
// engine/numerics/fp8_history.h): per cast key, device arrays the executor
// carves from one allocation (gpu_footprint::fp8DelayedStateBytes).
struct Fp8DelayedState {
  float* scale = nullptr;     // [keys] this step's scale
  float* last = nullptr;      // [keys] the scale of the previous step's writes (what a checkpoint keeps)
  unsigned* amax = nullptr;   // [keys] this step's largest |value| so far, as float bits
  int* count = nullptr;       // [keys] steps in the history
  int* format = nullptr;      // [keys] 1 for E5M2 (gradients), 0 for E4M3
  float* history = nullptr;   // [keys][kFp8History], a ring written at count % kFp8History
  int keys = 0;
};
// The arrays of `keys` keys at `at` (gpu_footprint::fp8DelayedStateBytes bytes).
Fp8DelayedState fp8DelayedStateAt(void* at, int keys);
// At the end of every step: each key's amax joins its history, the next
// step's scale comes from the history's largest (fp8Scale, the key's scale
// kept where that says nothing) and the amax starts again from 0.
void fp8DelayedEndStep(const Fp8DelayedState& state, cudaStream_t s);

// One output of a kernel writing FP8 under delayed scaling: the writer's
// key's scale this step (read on the device, so a graph replays it), its
// amax (which the writer raises to its values' largest |value|), and where
// it leaves 1 / scale for the GEMMs that read the codes.
struct Fp8Write {
  Fp8Format format = Fp8Format::E4M3;
  const float* scale = nullptr;
  unsigned* amax = nullptr;
  float* scale_inv = nullptr;
  float* scale_inv_t = nullptr;  // a transposed copy's, or null
};
// The casts of fp8CastCurrentScaling and fp8CastTransposeCurrentScaling
// with the key's scale instead: one pass over x, its amax taken on the way.
void fp8CastDelayed(void* out, const void* x, DType dt, int64_t n, const Fp8Write& w, cudaStream_t s);
void fp8CastTransposeDelayed(void* out, void* out_t, const void* x, DType dt, int64_t rows, int64_t cols,
                             const Fp8Write& w, cudaStream_t s);
// RMSNorm and SwiGLU (forward and backward, not accumulating) writing
// their outputs as FP8 codes of the values computed in fp32 (the CPU
// reference quantizes its values, not their bf16 roundings); x, dy and the
// weight in dt. yt / dxt (or null): the transposed copy of the codes too
// ([C, M], [F, M], [2F, M]; OpAttrs::fp8_transposed_out), from the same
// tile where the tiled kernels take the buffers (bf16, M a multiple of 4,
// C and F of 8, RMSNorm's rstd in fp32), else transposed afterwards.
void rmsnormForwardFp8(void* y, void* yt, void* rstd, DType rstd_dt, const void* x, const void* w, int64_t M,
                       int64_t C, DType dt, const Fp8Write& out, cudaStream_t s);
void swigluForwardFp8(void* y, void* yt, const void* x, int64_t M, int64_t F, DType dt, const Fp8Write& out,
                      cudaStream_t s);
void swigluBackwardFp8(void* dx, void* dxt, const void* dy, const void* x, int64_t M, int64_t F, DType dt,
                       const Fp8Write& out, cudaStream_t s);
// The grouped attention's backward writing its q, k and v gradient as FP8
// codes (training.fp8_attention_grad), dqkv [B * Tn, (H + 2 KV) C / H] and
// its transposed copy dqkv_t, from the values in fp32: the tensor-core
// kernels' epilogues store the codes instead of bf16 (bf16 inputs, heads 64
// or 128 wide, Tn a multiple of 4); anything else throws (the plan pass
// marks only such shapes, engine/passes/fp8_gemms.cpp). Scratch as
// groupedAttentionBackward's.
void groupedAttentionBackwardFp8(void* dqkv, void* dqkv_t, const void* dout, const void* qkv, const void* out,
                                 const void* lse, DType lse_dt, int64_t B, int64_t Tn, int64_t C, int64_t H,
                                 int64_t KV, DType dt, const Fp8Write& w, void* scratch, cudaStream_t s);
// GPT-2's LayerNorm, GELU and GELU's gradient (not accumulating) writing
// FP8 codes in both layouts the same way (y [rows, cols] and yt [cols,
// rows]): bf16 inputs of whole 16-byte vectors, cols a multiple of 8, rows
// of 4, LayerNorm's statistics in fp32; anything else throws (the plan
// check refuses such plans first, engine/plan/gpu_support.cpp).
void layernormForwardFp8(void* y, void* yt, void* mean, DType mean_dt, void* rstd, DType rstd_dt, const void* x,
                         const void* w, const void* b, int64_t M, int64_t C, DType dt, const Fp8Write& out,
                         cudaStream_t s);
void geluForwardFp8(void* y, void* yt, const void* x, int64_t rows, int64_t cols, DType dt, const Fp8Write& out,
                    cudaStream_t s);
void geluBackwardFp8(void* dx, void* dxt, const void* dy, const void* x, int64_t rows, int64_t cols, DType dt,
                     const Fp8Write& out, cudaStream_t s);
// db[N] (+)= the column sums of an FP8 gradient [M, N], each code decoded
// and multiplied by *scale_inv (a linear layer's bias gradient in FP8
// plans); deterministic, through partial sums in scratch
// (biasGradientScratchBytes(N)). transposed: codes holds the gradient's
// transposed copy [N, M].
void biasGradientFp8(void* db, const void* codes, Fp8Format format, const float* scale_inv, int64_t M, int64_t N,
                     bool transposed, bool accumulate, DType dt, float* scratch, cudaStream_t s);
// out[cols, rows] = in[rows, cols]^T, one byte per element (rows and cols
// multiples of 4): the K-major copies Hopper's FP8 GEMMs read.
void transposeBytes(void* out, const void* in, int64_t rows, int64_t cols, cudaStream_t s);

// *out = a 64-bit fingerprint of `bytes` bytes at `data` (replica_hash.cu):
// the same value for the same bytes on every GPU and run, another one when
// any bit differs (barring a 2^-64 collision). The replica check's hash.
void replicaHash(const void* data, int64_t bytes, uint64_t* out, cudaStream_t s);

}  // namespace tandem::cuda
