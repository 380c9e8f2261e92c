#pragma once
// The tied embedding's gradient under a sharded optimizer.
//
// With tied embeddings the wte gradient has two contributions: the LM head's
// weight gradient, dense and finished at the start of the backward, and the
// embedding backward's scatter of the input gradient dx0 [B*T, C] into the
// rows of the tokens seen, finished last. Reduce-scattering the whole bucket
// (wte and wpe, 75 MiB for GPT-2) after the embedding backward leaves that
// collective exposed at the end of every step (193 us on two H200s).
//
// This pass moves the bucket's reduce-scatter to right after the last
// contribution before the final embedding backward (the LM head's), where
// it runs beside the rest of the backward, and replaces the embedding
// backward's own contribution by an all-gather of dx0 (B*T*C elements per
// rank, a third of the bucket for GPT-2 124M at micro-batch 16): every rank
// then adds 1/ranks of every rank's rows to the part of wte that lies in its
// shard, and sets (or adds to) its part of wpe the same way. The result is
// the average over the ranks, as the reduce-scatter would have produced.
//
// The final EmbeddingBwd then reads the gathered gradient [ranks*B*T, C]
// (its attrs.shards = ranks) and needs the tokens of every rank's
// micro-batch: executors rebuild them from the global sample addressing
// (engine/numerics/data.h), as every rank can.
//
// It pays only while the gathered gradient, ranks * B*T*C elements, is
// smaller than the bucket (V*C + T*C): GPT-2 124M at micro-batch 16 on two
// ranks gathers 50 MB instead of reduce-scattering 79 MB late; on eight it
// would gather 201 MB.
//
// Applies only with the optimizer sharded over more than one rank,
// comm.gather_embedding_gradient on, where it pays, and to a last bucket
// that holds exactly the gradients the final embedding backward writes, one
// of them with an earlier contribution (tied embeddings). Otherwise the
// graph is unchanged.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// After applyGradientBuckets, before appendOptimizer. Returns true when the
// graph changed.
bool applyGatheredEmbeddingGradient(Graph& g, const JobSpec& job);

// The final micro-batch's EmbeddingBwd node when the job asks for the
// gathered form and it pays (see above), else -1. applyGradientBuckets
// gives that node's gradients a bucket of their own.
int embeddingBackwardToGather(const Graph& g, const JobSpec& job);

}  // namespace tandem
