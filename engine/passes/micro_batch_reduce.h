#pragma once
// Sharded gradients reduced every micro-batch (comm.reduce_every_micro_batch,
// with parallel.shard_parameters and gradient accumulation): FSDP's
// behaviour outside `no_sync`.
//
// Without it, a bucket's whole gradient accumulates over the step's
// micro-batches and is reduce-scattered once, after the last; the whole
// bucket lives from the first micro-batch's first gradient to then. With
// it, every micro-batch writes a whole bucket of its own (micro-batch 0 the
// bucket's buffer, micro-batch m the copy `grad.bucketB.mbM`, whose views
// `<gradient>.mbM` its tasks write; autodiff starts each micro-batch's
// parameter gradients afresh), reduce-scattered right after the micro-batch
// completes it: micro-batch 0's into the bucket's gradient shard, micro-batch
// m's into `grad.bucketB.shard.mbM`, added to the shard where micro-batch
// m + 1 completes the bucket (the last one's at the end of the backward).
// A whole bucket then lives for one micro-batch; the price is one
// reduce-scatter per micro-batch instead of one per step, and the sum of
// averages is rounded once per micro-batch in bf16 jobs.
//
// Needs applyGradientBuckets first (sharded parameters: one out-of-place
// reduce-scatter per bucket, on the last micro-batch), before the optimizer.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// True when the job reduces its gradients every micro-batch.
bool reducesEveryMicroBatch(const JobSpec& job);

void applyMicroBatchReduce(Graph& g, const JobSpec& job);

}  // namespace tandem
