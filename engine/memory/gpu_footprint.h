#pragma once
// What the CUDA executor allocates beyond a plan's arena, computed without
// CUDA: cuBLASLt workspaces, each stream's kernel scratch, the batch
// staging and the optimizer's tables. The executor allocates exactly these
// (engine/cuda/executor.cpp), and `tandem plan --fit` and the planner's
// fitting choices count them on a machine without a GPU, so a budget
// checked on a laptop is the one `tandem run` checks on the GPU.
//
// The constants are launch shapes of the executor's kernels that size their
// scratch; the kernels take them from here (engine/cuda/*.cu).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// Declared, not included: the CUDA sources include this header, and
// engine/plan/plan.h needs C++20 where they compile as C++17.
namespace tandem {
struct Plan;
struct RankPlan;
struct Task;
}  // namespace tandem

namespace tandem::gpu_footprint {

// cuBLASLt workspace per compute stream.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t(32) << 20;
// Device memory `tandem run` keeps free beyond its allocations: the CUDA
// Graph, NCCL's buffers and the allocator's slack.
inline constexpr int64_t kRunReserveBytes = int64_t(512) << 20;

// Layernorm backward: a fixed grid (2 blocks per H200 SM) so that the
// reduction order of the parameter sums never depends on the row count.
inline constexpr int kLayernormBwdBlocks = 264;
inline constexpr int kLayernormWarpsPerBlock = 8;
inline constexpr int kLayernormBwdWarps = kLayernormBwdBlocks * kLayernormWarpsPerBlock;
// Bias gradients: partial column sums over a fixed number of row slices
// (scalar and 8-wide kernels), added in order afterwards.
inline constexpr int kBiasRowChunks = 64;
inline constexpr int kBiasVecChunks = 256;
// Multi-tensor launches (grad norm, AdamW) work in chunks of this many
// elements; the grad norm keeps one fp32 partial per chunk.
inline constexpr int64_t kChunkElements = 16384;
// FP8 casts (current scaling): the largest magnitude in partial maxima of
// this many blocks, then the cast.
inline constexpr int kFp8AmaxBlocks = 528;
// sizeof(cuda::TensorSlot), one per tensor of a multi-tensor launch
// (engine/cuda/kernels.h asserts it).
inline constexpr int64_t kTensorSlotBytes = 72;

int64_t layernormScratchBytes(int64_t C, bool bias_grad = false);
int64_t attentionScratchBytes(int64_t B, int64_t Tn, int64_t H, int64_t C = 0, bool bias_grad = false);
int64_t crossEntropyScratchBytes(int64_t M);
// RMSNorm backward: the weight gradient's partial sums, one row per block
// of the layernorm kernel it shares (kLayernormBwdBlocks) or per row slice.
int64_t rmsnormScratchBytes(int64_t C);
// One [B, Tn, 3C] multi-head copy of a grouped qkv (256-byte aligned).
int64_t groupedQkvBytes(int64_t B, int64_t Tn, int64_t C, int64_t element_bytes);
// Grouped-query attention (engine/cuda/llama.cu) on the tensor-core kernels
// (bf16 heads 64 or 128 wide): the rotated queries and keys [B, Tn, (H+KV)
// D], and the rotary angles [Tn, D/2] of (cos, sin) in fp32.
bool groupedAttentionOnTensorCores(int64_t C, int64_t H, int64_t element_bytes);
int64_t rotatedQkBytes(int64_t B, int64_t Tn, int64_t C, int64_t H, int64_t KV);
int64_t ropeAngleBytes(int64_t Tn, int64_t D);
// Its scratch: on the tensor cores the rotated copy and the angles (and in
// the backward the attention's own scratch); elsewhere the forward's
// expanded multi-head copy, the backward's copy, its gradient and the
// attention's scratch.
int64_t groupedAttentionScratchBytes(int64_t B, int64_t Tn, int64_t H, int64_t C, int64_t KV, int64_t element_bytes,
                                     bool backward);
int64_t biasGradientScratchBytes(int64_t N);
// Rows of partial bias sums the attention backward stores (one per 64-row tile).
int64_t attentionBiasPartialRows(int64_t B, int64_t Tn);

// The K-major copies an FP8 GEMM makes itself (Hopper's FP8 GEMMs read both
// operands K-major) where its operand's cast wrote none
// (OpAttrs::fp8_transposed): the data gradient's transposed weight [K, N];
// the weight gradient's transposed gradient [N, M] and, at the second offset
// (align256(M * N), or 0 when the gradient needs none), the transposed input
// [K, M]. 0 for the forward and for a GEMM not in FP8.
int64_t fp8TransposeBytes(const Task& t);
// How many of those copies (kernels) the GEMM makes.
int fp8TransposeCount(const Task& t);
int64_t fp8TransposeSecondOffset(const Task& t);
// Each FP8 buffer's 1 / scale, a float at the start of a 256-byte slot of
// its own: cuBLASLt chooses an algorithm for the alignment of the scale
// pointers it is shown, so every one it reads has the same alignment.
inline constexpr int64_t kFp8ScaleSlotBytes = 256;
// The casts whose amax their input's writer takes (OpAttrs::amax_by_writer:
// SwiGLU's forward and backward, their blocks' largest magnitudes as
// kFp8AmaxBlocks partial maxima), so the cast skips its own pass over the
// input: (producer task, cast task) pairs in task order. A flagged cast
// whose input's last writer in the task list is not such a kernel is left
// out and takes the amax itself.
std::vector<std::pair<int, int>> fp8AmaxProducers(const RankPlan& rp);
// The partial maxima of one such pair, after the scale slots.
inline constexpr int64_t kFp8AmaxPartialsBytes = (int64_t(kFp8AmaxBlocks) * 4 + 255) / 256 * 256;
// FP8 delayed scaling (training.fp8_scaling delayed): each task writing FP8
// with a scale from earlier steps (a cast without current_scaling, or a
// norm or activation writing FP8 itself) uses its cast key's scale
// (engine/numerics/fp8_history.h). The keys in the order tasks first write
// them, whether each key's writes are gradients (E5M2), and each task's
// key (-1: none). Empty under current scaling.
struct Fp8DelayedKeys {
  std::vector<std::string> names;
  std::vector<bool> backward;
  std::vector<int> of_task;
};
Fp8DelayedKeys fp8DelayedKeys(const RankPlan& rp);
// The device state of `keys` keys: five arrays of a 4-byte value per key
// (scale, last scale, this step's amax, history length, format), each
// fp8DelayedArrayBytes, then kFp8History amaxes per key; 0 for no keys.
inline int64_t fp8DelayedArrayBytes(int keys) { return (int64_t(keys) * 4 + 255) / 256 * 256; }
int64_t fp8DelayedStateBytes(int keys);
// The scale slots, the producers' partial maxima and the delayed-scaling
// state, in one allocation.
int64_t fp8ScaleBytes(const RankPlan& rp);

// Scratch of one task of `rp` on its stream (a stream's tasks share one buffer).
int64_t taskScratchBytes(const RankPlan& rp, const Task& t);
// Each stream's scratch: the most any of its tasks needs, at least 256 B.
std::vector<int64_t> scratchBytesPerStream(const RankPlan& rp);

// The executor's buffers beyond rank 0's arena, as allocated (256-byte
// aligned), by kind.
struct Footprint {
  int64_t gemm_workspaces = 0;
  int64_t scratch = 0;
  int64_t batch_staging = 0;
  int64_t optimizer_tables = 0;
  int64_t fp8_scales = 0;
  int64_t fixed = 4096;  // step scalars and small tables
  int64_t total() const { return gemm_workspaces + scratch + batch_staging + optimizer_tables + fp8_scales + fixed; }
};
Footprint executorFootprint(const RankPlan& program);
Footprint executorFootprint(const Plan& plan);  // largestProgram(plan)'s

// What `tandem run` needs free on a GPU for `plan` beyond its arena: the
// executor's buffers and kRunReserveBytes (largestProgram(plan)'s).
int64_t runOverheadBytes(const Plan& plan);
// All that a rank running `program` needs free: arena, buffers, reserve.
int64_t runBytes(const RankPlan& program);
// The program whose ranks need the most memory (runBytes): the plan's one
// program, or of several pipeline stages the one that decides whether the
// job fits.
const RankPlan& largestProgram(const Plan& plan);

}  // namespace tandem::gpu_footprint
