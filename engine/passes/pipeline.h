#pragma once
// Pipeline parallelism (parallel.pipeline_parallel stages; Megatron-LM's
// non-interleaved one-forward-one-backward schedule, PipeDream-Flush).
//
// Stage s of p holds the blocks [s L/p, (s + 1) L/p); the first also the
// embedding, the last the final LayerNorm, the LM head and the loss. Each
// stage is a program of its own (Plan::programs[s]) run by the ranks of
// that stage. Per micro-batch a stage receives its input activations from
// the stage before (a Recv on the stream "comm.recv"), runs its blocks and
// sends its output to the stage after ("comm.send"); the backward receives
// the output's gradient, runs the blocks' backward and sends the input's
// gradient back. Sends and receives sit on streams of their own so that a
// send waiting for its peer never holds up a receive the peer waits for.
// Each boundary b (between stages b and b + 1) is a family of two-rank
// groups "pp<b>", one per (replica, tensor-parallel place).
//
// The micro-batches run in 1F1B order: stage s first runs min(p - s - 1,
// m) forwards, then alternates one forward and one backward, then runs the
// remaining backwards; a stage holds the activations of at most p - s
// micro-batches at once. The backwards run in micro-batch order, so
// gradients accumulate as without a pipeline. With interleaving
// (ModelChunk) each chunk's backwards still run in micro-batch order.
//
// Tied embeddings: the first and the last stage each hold the token
// embedding (the last as the LM head); the two gradients are summed over
// the "embed" group (the two stages' ranks at one place) after the
// backward, so both copies take the same update (as Megatron-LM does). The gradient norm is summed over the
// stages ("pipe": every stage's rank at one place), the two copies counted
// once (ParamInfo::copies).

#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Consecutive blocks that one stage runs in one pass of a micro-batch: the
// stage's whole share of the model, or with interleaving
// (parallel.pipeline_chunks = v) one of its v chunks. The model's p x v
// chunks are dealt round-robin: chunk i runs on stage i % p, so a
// micro-batch's forward goes stage 0, 1, ..., p - 1, 0, 1, ... and the
// last stage's chunks send to the first stage's next ones.
struct ModelChunk {
  int index = 0, count = 1;            // among the model's chunks, in the model's order
  int stages = 1;                      // pipeline stages
  int first_layer = 0, end_layer = 0;  // blocks [first_layer, end_layer)
  bool first() const { return index == 0; }  // runs the embedding
  bool last() const { return index == count - 1; }  // runs the LM head and the loss
  int stage() const { return index % stages; }
  int local() const { return index / stages; }  // the chunk's place on its stage
  // The group families of the transfers from the chunk before and to the
  // chunk after (pipelineBoundaryGroup): boundary b joins stage b and
  // stage (b + 1) % p.
  int boundaryBefore() const { return (index - 1) % stages; }  // not for the first chunk
  int boundaryAfter() const { return index % stages; }
  // Appended to the names of its transfers and their tensors when a stage
  // holds several chunks (".c1"); empty otherwise.
  std::string tag() const;
};

struct PipelineStage {
  int index = 0, count = 1;
  std::vector<ModelChunk> chunks;  // the stage's chunks, in the model's order
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
};
PipelineStage pipelineStage(const JobSpec& job, int stage);

// The group family of the boundary between stages b and b + 1.
std::string pipelineBoundaryGroup(int boundary);

// A Send of `tensor` to, or a Recv into it from, the neighbouring stage
// across `boundary`, on the stream of its direction.
Node pipelineTransfer(const Graph& g, OpKind op, const std::string& name, int tensor, int boundary, Phase phase,
                      int micro_batch);

// The nodes of one micro-batch on one chunk: its forward [forward_begin,
// backward_begin) and backward [backward_begin, backward_end), as built.
struct MicroBatchNodes {
  size_t forward_begin = 0, backward_begin = 0, backward_end = 0;
};
// Reorders the graph's nodes (built micro-batch after micro-batch, a
// micro-batch's chunks in the stage's order) into the stage's 1F1B order;
// with several chunks per stage the interleaved one (Megatron-LM's
// virtual-pipeline schedule): micro-batches in groups of p, each group
// through chunk 0, then chunk 1, ...; stage s first runs 2(p - s - 1) +
// (v - 1) p forwards (all of them when m = p), then alternates, the
// backwards taking the chunks in reverse.
void orderOneForwardOneBackward(Graph& g, const std::vector<MicroBatchNodes>& micro_batches,
                                const PipelineStage& stage);

// Tied embeddings over several stages: on the first and the last stage, the
// sum of the two stages' embedding gradients after the stage's backward
// (before the data-parallel collective of the bucket it completes, whose
// shards, with a sharded optimizer, lie elsewhere on the two stages). Not
// earlier: the last stage finishes its embedding gradient first, and
// waiting there for the first stage, which waits for the last stage's
// gradients, could hold up a rank that runs its tasks in issue order.
// `wte` is the stage's embedding parameter tensor.
void applyTiedEmbeddingSum(Graph& g, const JobSpec& job, const PipelineStage& stage, int wte);

}  // namespace tandem
