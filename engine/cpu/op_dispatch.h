#pragma once
// The math ops of a Plan task mapped onto the reference kernels, for any
// element type and any storage. The executor uses it with float over its
// arenas; the finite-difference tests use it with double over plain vectors,
// so both run exactly the same task semantics (operand order, accumulate
// flags, in-place cross-entropy).
//
// Storage must provide: T* in(int buffer) (const use), T* out(int buffer)
// (current contents kept, for accumulation), const int32_t* ints(int buffer),
// uint8_t* bytes(int buffer) (u8 buffers: dropout masks),
// int64_t elements(int buffer), void settle(int buffer) (round what was
// written so far to the buffer's storage precision; no-op where it is T),
// uint64_t randomKey() (the draws of this step on this rank).

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/kernels_context_parallel.h"
#include "engine/plan/plan.h"

namespace tandem::cpu {

// The attention dropout's draw for a task: the storage's key with the
// task's layer and micro-batch, so a recomputed forward draws what the
// forward drew.
inline uint64_t attentionDropoutKey(uint64_t storage_key, const Task& t) {
  return storage_key ^ (uint64_t(t.layer + 1) * 0xD1B54A32D192ED03ull) ^
         (uint64_t(t.micro_batch + 1) * 0x8CB92BA72F3D8DD7ull);
}

// An FP8 GEMM's operand in `slot` as the row-major [rows, columns] the
// kernels take: the buffer itself, or, where the GEMM reads the transposed
// copy its cast wrote (attrs.fp8_transposed), that copy turned back in
// `scratch`.
template <class T, class Storage>
const T* rowMajorOperand(const Task& t, Storage& io, int slot, int64_t rows, int64_t columns, std::vector<T>& scratch) {
  const T* v = io.in(t.reads.at(size_t(slot)));
  if (!(t.attrs.fp8_transposed & (1 << slot))) return v;
  scratch.resize(size_t(rows * columns));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c) scratch[size_t(r * columns + c)] = v[size_t(c * rows + r)];
  return scratch.data();
}

// Returns false for ops that are not pure math (data, collectives, optimizer).
template <class T, class Storage>
bool runMathOp(const Task& t, Storage& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  switch (t.op) {
    case OpKind::Embedding:
      // Llama's embedding has no position table (R[2]).
      embeddingForward<T>(io.out(W[0]), io.ints(R[0]), io.in(R[1]), R.size() > 2 ? io.in(R[2]) : nullptr, a.b, a.t,
                          a.c);
      return true;
    case OpKind::EmbeddingBwd: {
      if (a.shards > 1) return false;  // gathered over ranks: the executor's (pass_embedding_gather.h)
      T* dwte = io.out(W[0]);
      T* dwpe = W.size() > 1 ? io.out(W[1]) : nullptr;
      // One accumulate flag in the kernel, two outputs that may differ (a
      // tied wte already holds the LM head's contribution): clear the ones
      // written fresh, then always accumulate.
      if (!a.accumulate) std::fill(dwte, dwte + io.elements(W[0]), T(0));
      if (dwpe && !a.accumulate_params) std::fill(dwpe, dwpe + io.elements(W[1]), T(0));
      embeddingBackward<T>(dwte, dwpe, io.in(R[0]), io.ints(R[1]), a.b, a.t, a.c, a.v, true);
      return true;
    }
    case OpKind::LayerNorm:
      layernormForward<T>(io.out(W[0]), io.out(W[1]), io.out(W[2]), io.in(R[0]), io.in(R[1]), io.in(R[2]),
                          a.m, a.c);
      return true;
    case OpKind::LayerNormBwd:
      // A bias gradient it sums (engine/passes/bias_grad.h) is the residual
      // gradient in dx before the layernorm's contribution is added to it.
      if (a.bias_grad) columnSums<T>(io.out(W[3]), io.in(W[0]), a.m, a.c, a.accumulate_params);
      layernormBackward<T>(io.out(W[0]), io.out(W[1]), io.out(W[2]), io.in(R[0]), io.in(R[1]), io.in(R[2]),
                           io.in(R[3]), io.in(R[4]), a.m, a.c, a.accumulate, a.accumulate_params);
      return true;
    case OpKind::Matmul:
      matmulForward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), a.has_bias ? io.in(R[2]) : nullptr, a.m, a.n,
                       a.k);
      return true;
    case OpKind::MatmulBwdData: {
      std::vector<T> w;
      matmulBackwardData<T>(io.out(W[0]), io.in(R[0]), rowMajorOperand(t, io, 1, a.n, a.k, w), a.m, a.n, a.k,
                            a.accumulate);
      return true;
    }
    case OpKind::MatmulBwdWeight: {
      std::vector<T> dy, x;
      matmulBackwardWeight<T>(io.out(W[0]), a.has_bias ? io.out(W[1]) : nullptr,
                              rowMajorOperand(t, io, 0, a.m, a.n, dy), rowMajorOperand(t, io, 1, a.m, a.k, x), a.m,
                              a.n, a.k, a.accumulate_params);
      return true;
    }
    case OpKind::Attention: {
      // Materialized: the second output is the probabilities; the
      // log-sum-exp the kernel also forms is scratch.
      std::vector<T> lse_scratch(a.materialized ? size_t(a.b * a.h * a.t) : 0);
      T* lse = a.materialized ? lse_scratch.data() : io.out(W[1]);
      T* probs = a.materialized ? io.out(W[1]) : nullptr;
      AttentionDropout<T> dropout;
      if (a.dropout > 0)  // its third and fourth outputs: the dropped probabilities, the mask
        dropout = {a.dropout, attentionDropoutKey(io.randomKey(), t), io.out(W[2]), io.bytes(W[3])};
      const AttentionDropout<T>* drop = a.dropout > 0 ? &dropout : nullptr;
      if (a.kv_heads > 0)
        groupedAttentionForward<T>(io.out(W[0]), lse, io.in(R[0]), a.b, a.t, a.c, a.h, a.kv_heads, probs, drop);
      else
        attentionForward<T>(io.out(W[0]), lse, io.in(R[0]), a.b, a.t, a.c, a.h, probs, drop);
      return true;
    }
    case OpKind::AttentionBwd: {
      // Its fourth input: the probabilities (materialized) or the log-sum-exp.
      const T* lse = a.materialized ? nullptr : io.in(R[3]);
      const T* probs = a.materialized ? io.in(R[3]) : nullptr;
      AttentionDropout<T> dropout;
      if (a.dropout > 0)  // its fifth and sixth inputs: the dropped probabilities, the mask
        dropout = {a.dropout, 0, const_cast<T*>(io.in(R[4])), io.bytes(R[5])};
      const AttentionDropout<T>* drop = a.dropout > 0 ? &dropout : nullptr;
      if (a.kv_heads > 0)
        groupedAttentionBackward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), io.in(R[2]), lse, a.b, a.t, a.c, a.h,
                                    a.kv_heads, a.accumulate, probs, drop);
      else
        attentionBackward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), io.in(R[2]), lse, a.b, a.t, a.c, a.h,
                             a.accumulate, probs, drop);
      if (a.bias_grad) {  // the sums of dqkv as stored, which the weight GEMM would have read
        io.settle(W[0]);
        columnSums<T>(io.out(W[1]), io.in(W[0]), a.b * a.t, 3 * a.c, a.accumulate_params);
      }
      return true;
    }
    case OpKind::RmsNorm:
      rmsnormForward<T>(io.out(W[0]), io.out(W[1]), io.in(R[0]), io.in(R[1]), a.m, a.c);
      return true;
    case OpKind::RmsNormBwd:
      rmsnormBackward<T>(io.out(W[0]), io.out(W[1]), io.in(R[0]), io.in(R[1]), io.in(R[2]), io.in(R[3]), a.m, a.c,
                         a.accumulate, a.accumulate_params);
      return true;
    case OpKind::SwiGlu: swigluForward<T>(io.out(W[0]), io.in(R[0]), a.m, a.c); return true;
    case OpKind::SwiGluBwd:
      swigluBackward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), a.m, a.c, a.accumulate);
      return true;
    case OpKind::PackKv:
      packKv<T>(io.out(W[0]), io.in(R[0]), a.b * a.t, {a.c, a.h, a.kv_heads});
      return true;
    case OpKind::PackKvBwd:
      packKvBackward<T>(io.out(W[0]), io.in(R[0]), a.b * a.t, {a.c, a.h, a.kv_heads}, a.accumulate);
      return true;
    case OpKind::SquaredRelu: squaredReluForward<T>(io.out(W[0]), io.in(R[0]), a.elements); return true;
    case OpKind::SquaredReluBwd:
      squaredReluBackward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), a.elements, a.accumulate);
      return true;
    case OpKind::Gelu: geluForward<T>(io.out(W[0]), io.in(R[0]), a.elements); return true;
    case OpKind::GeluBwd:
      geluBackward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), a.elements, a.accumulate);
      return true;
    case OpKind::Add: addForward<T>(io.out(W[0]), io.in(R[0]), io.in(R[1]), a.elements); return true;
    case OpKind::CrossEntropy:
      crossEntropyForward<T>(io.out(W[0]), io.in(R[0]), io.ints(R[1]), a.m, a.v);
      return true;
    case OpKind::CrossEntropyBwd: {
      T* dlogits = io.out(W[0]);  // in place over the logits
      crossEntropyBackward<T>(dlogits, dlogits, io.ints(R[1]), a.m, a.v, a.loss_scale);
      return true;
    }
    default: return false;
  }
}

}  // namespace tandem::cpu
