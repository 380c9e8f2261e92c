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
// gradients accumulate as without a pipeline.
//
// Tied embeddings: the first and the last stage each hold the token
// embedding (the last as the LM head); the two gradients are summed over
// the "embed" group (the two stages' ranks at one place) after the
// backward, so both copies take the same update (as Megatron-LM does). The gradient norm is summed over the
// stages ("pipe": every stage's rank at one place), the two copies counted
// once (ParamInfo::copies).

#include <string>
#include <vector>

#include "engine/graph.h"
#include "engine/job.h"

namespace tandem {

struct PipelineStage {
  int index = 0, count = 1;
  int first_layer = 0, end_layer = 0;  // blocks [first_layer, end_layer)
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

// The nodes of one micro-batch: its forward [forward_begin, backward_begin)
// and backward [backward_begin, backward_end), as built.
struct MicroBatchNodes {
  size_t forward_begin = 0, backward_begin = 0, backward_end = 0;
};
// Reorders the graph's nodes (built micro-batch after micro-batch) into the
// stage's 1F1B order.
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
