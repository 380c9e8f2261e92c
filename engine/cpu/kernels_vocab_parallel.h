#pragma once
// The embedding and the loss with the vocabulary split over a
// tensor-parallel group (Megatron-LM's vocabulary-parallel embedding and
// cross-entropy; engine/passes/tensor_parallel.h). A rank holds `rows`
// consecutive rows of the embedding (and of the LM head), from row `first`;
// its logits are the columns [first, first + rows) of the whole logits.

#include <cstdint>

namespace tandem::cpu {

// out[b, t] = wte[token - first] where the token is the rank's, else 0,
// plus wpe[t] on the group's first rank (the all-reduce after it sums the
// ranks' rows: every token's row once, the position once).
void vocabParallelEmbedding(float* out, const int32_t* tokens, const float* wte_rows, const float* wpe, int64_t B,
                            int64_t T, int64_t C, int64_t first, int64_t rows, bool add_position);
// The rank's rows of the embedding gradient (tokens in its range) and the
// whole position gradient, each written or added to (`accumulate_*`).
void vocabParallelEmbeddingBackward(float* dwte_rows, float* dwpe, const float* dout, const int32_t* tokens,
                                    int64_t B, int64_t T, int64_t C, int64_t first, int64_t rows,
                                    bool accumulate_wte, bool accumulate_wpe);

// Per token, three floats of the rank's logits: their maximum, the sum of
// exp(logit - that maximum), and the target's logit where the target is the
// rank's (else 0).
void crossEntropyStats(float* stats, const float* logits, const int32_t* targets, int64_t M, int64_t first,
                       int64_t rows);
// Losses from every rank's statistics ([ranks, M, 3], gathered in rank
// order): log(sum_r s_r exp(m_r - m)) + m - target logit, m = max_r m_r.
void vocabParallelCrossEntropy(float* losses, const float* gathered, int64_t M, int64_t ranks);
// dlogits = scale (softmax - one-hot) over the rank's columns, the softmax's
// maximum and sum from every rank's statistics; in place over the logits.
void vocabParallelCrossEntropyBackward(float* logits, const int32_t* targets, const float* gathered, int64_t M,
                                       int64_t first, int64_t rows, int64_t ranks, double scale);

}  // namespace tandem::cpu
