#pragma once
// The tensor-core attention kernels' entry points (attention_tc.cu), for the
// multi-head dispatch (attention.cu) and the grouped-query attention
// (llama.cu), which hands them its grouped layout as it is instead of an
// expanded multi-head copy.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels.h"  // Fp8Write
#include "engine/ir/types.h"

namespace tandem::cuda {

// Where a head's columns sit in a tensor of rows `width` elements wide:
// key/value group g's columns start at g * group_cols; within a group query
// head r at r * D, the group's K at k_off and V at v_off.
struct HeadCols {
  int width = 0, group_cols = 0, k_off = 0, v_off = 0;
  __host__ __device__ int q(int h, int group, int D) const { return (h / group) * group_cols + (h % group) * D; }
  __host__ __device__ int k(int kv_head) const { return kv_head * group_cols + k_off; }
  __host__ __device__ int v(int kv_head) const { return kv_head * group_cols + v_off; }
};

// The kernels' view of their inputs and of the gradient they write: Q and K
// in one tensor, V in another (the same tensor for multi-head attention),
// `group` query heads per key/value head.
struct AttnLayout {
  HeadCols qk, v, grad;
  int group = 1;
};

// What the tensor-core kernels read: the tensors holding Q and K and holding
// V, their layout, and for the backward the rotary angles (cos, sin) of
// positions [0, Tn), [Tn][D/2] in fp32: with them dQ and dK are rotated
// back as they are stored (null: stored as computed).
struct TcAttention {
  const void* qk = nullptr;
  const void* v = nullptr;
  AttnLayout layout;
  const float2* rope = nullptr;
};

// Where the backward writes its gradient as FP8 codes instead of bf16
// (training.fp8_attention_grad, delayed scaling): [B * Tn, width] at rows
// and transposed ([width, B * Tn], the K-major copy the weight-gradient GEMM
// reads) at cols, by the delayed-scaling writer w (its format, scale, amax
// and 1 / scale slots). rows null: bf16 into dqkv.
struct Fp8GradOut {
  uint8_t* rows = nullptr;
  uint8_t* cols = nullptr;
  int64_t tokens = 0;  // B * Tn
  Fp8Write w;
};

// Multi-head attention's [B, Tn, 3C] layout of [q | k | v] heads.
AttnLayout multiHeadLayout(int64_t C, int64_t H);

// bf16 heads 64 wide, or 128 where the wgmma code runs (after prepareKernels).
bool attentionTensorCoreEligible(int64_t C, int64_t H, DType dt);
void prepareAttentionKernels();
void attentionForwardTc(void* out, void* lse, DType lse_dt, const TcAttention& in, int64_t B, int64_t Tn, int64_t C,
                        int64_t H, cudaStream_t s);
// delta: B * H * Tn floats; bias_partial (multi-head only) as in attention.cu.
// fp8.rows set: the gradient as FP8 codes there instead of dqkv (Tn a
// multiple of 4; neither accumulated nor with a bias gradient).
void attentionBackwardTc(void* dqkv, const void* dout, const TcAttention& in, const void* out, const void* lse,
                         DType lse_dt, float* delta, float* bias_partial, int64_t B, int64_t Tn, int64_t C, int64_t H,
                         bool accumulate, cudaStream_t s, const Fp8GradOut& fp8 = {});

}  // namespace tandem::cuda
