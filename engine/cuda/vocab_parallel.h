#pragma once
// The embedding and the loss with the vocabulary split over a
// tensor-parallel group, on the GPU (Megatron-LM's vocabulary-parallel
// embedding and cross-entropy; the CPU reference's are
// engine/cpu/kernels_vocab_parallel.h, whose math these follow). A rank
// holds `rows` consecutive rows of the embedding (and of the LM head) from
// row `first`; its logits are the columns [first, first + rows).

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels.h"
#include "engine/ir/types.h"

namespace tandem::cuda {

// out[b, t] = wte_rows[token - first] for the rank's tokens, else 0, plus
// wpe[t] when add_position (the group's first rank; the all-reduce after it
// sums the ranks' rows).
void vocabParallelEmbedding(void* out, const int32_t* tokens, const void* wte_rows, const void* wpe, int64_t B,
                            int64_t Tn, int64_t C, int64_t first, int64_t rows, bool add_position, DType dt,
                            cudaStream_t s);
// The rank's rows of the embedding gradient (tokens in its range, summed in
// position order through `index`) and the whole position gradient.
void vocabParallelEmbeddingBackward(void* dwte_rows, void* dwpe, const void* dout, const int32_t* tokens,
                                    const TokenIndex& index, int64_t B, int64_t Tn, int64_t C, int64_t first,
                                    int64_t rows, bool accumulate_wte, bool accumulate_wpe, DType dt, cudaStream_t s);
// stats[m] = {max, sum of exp(logit - max), the target's logit or 0} over
// the rank's `rows` logits of row m (fp32 stats).
void crossEntropyStats(float* stats, const void* logits, const int32_t* targets, int64_t M, int64_t first,
                       int64_t rows, DType dt, cudaStream_t s);
// Losses from every rank's statistics ([ranks, M, 3] in rank order), into
// `losses` (loss_dt) and their sum, in row order, added to *loss_sum;
// `scratch` holds M floats.
void vocabParallelCrossEntropy(void* losses, DType loss_dt, const float* gathered, int64_t M, int64_t ranks,
                               float* loss_sum, float* scratch, cudaStream_t s);
// dlogits = scale (softmax - one-hot) over the rank's columns, in place.
void vocabParallelCrossEntropyBackward(void* logits, const int32_t* targets, const float* gathered, int64_t M,
                                       int64_t first, int64_t rows, int64_t ranks, float scale, DType dt,
                                       cudaStream_t s);

}  // namespace tandem::cuda
