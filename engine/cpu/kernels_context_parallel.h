#pragma once
// Context parallelism on the CPU reference (ParallelSpec::context_parallel):
// a rank holds two chunks of each sample's sequence (contextParallelPosition),
// gathers every rank's keys and values and attends with its own queries.
//
// The attention is computed through the whole-sequence kernels of
// kernels_attention.cpp and kernels_llama.cpp: the sequence is laid out
// whole, with the gathered keys and values at their positions and the
// rank's queries at theirs (every other query zero, its output gradient
// zero, so it contributes nothing), and the rank's rows are taken back. The
// oracle's cost is context_parallel times one rank's share, which is what
// makes it plainly the same computation as without the split.
//
// Shapes: qkv[B, T, W] of the rank's T tokens (GPT-2: W = 3C, [q | k | v];
// Llama: W = (H + 2 KV) D by group, as groupedAttentionForward); kv[B, T,
// 2, KV x D], the keys of every key/value head then their values (KV = H
// for GPT-2); gathered[cp, B, T, 2, KV x D], every rank's kv in group order.

#include <cstdint>

namespace tandem::cpu {

// The key/value heads of a layout: kv_heads, or H for multi-head attention (kv_heads 0).
struct AttentionLayout {
  int64_t C = 0;         // width of the query heads, H x D
  int64_t H = 0;         // query heads
  int64_t kv_heads = 0;  // 0: GPT-2's [q | k | v]; > 0: Llama's groups
  int64_t keyHeads() const { return kv_heads > 0 ? kv_heads : H; }
  int64_t headWidth() const { return C / H; }
  int64_t rowWidth() const { return kv_heads > 0 ? (H + 2 * kv_heads) * headWidth() : 3 * C; }
  int64_t kvWidth() const { return 2 * keyHeads() * headWidth(); }
  // The qkv column of packed column i (keys first, then values).
  int64_t kvColumn(int64_t i) const;
};

// kv[m, :] = the key and value columns of qkv[m, :], for M tokens.
template <class T>
void packKv(T* kv, const T* qkv, int64_t M, const AttentionLayout& layout);
// dqkv's key and value columns (+)= dkv; without accumulate its query
// columns are zeroed (the attention's backward adds them).
template <class T>
void packKvBackward(T* dqkv, const T* dkv, int64_t M, const AttentionLayout& layout, bool accumulate);

// The rank at `place` of `cp`: out[B, T, C] and lse[B, H, T] of its queries
// over the whole sequence's keys and values, causal by position.
template <class T>
void contextParallelAttentionForward(T* out, T* lse, const T* qkv, const T* gathered, int64_t B, int64_t Tn,
                                     const AttentionLayout& layout, int place, int cp);
// dqkv: its query columns (+)= the rank's query gradient; without
// accumulate the key and value columns are zeroed (their gradient is
// dgathered's, reduce-scattered back to the ranks that hold them).
// dgathered[cp, B, T, 2, KV x D] is written: the rank's queries'
// contribution to every position's key and value gradient.
template <class T>
void contextParallelAttentionBackward(T* dqkv, T* dgathered, const T* dout, const T* qkv, const T* out, const T* lse,
                                      const T* gathered, int64_t B, int64_t Tn, const AttentionLayout& layout,
                                      int place, int cp, bool accumulate);

}  // namespace tandem::cpu
