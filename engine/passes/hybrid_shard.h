#pragma once
// Hybrid sharding (FSDP's HYBRID_SHARD; parallel.shard_group_size below
// data_parallel, with parallel.shard_parameters).
//
// The sharding passes split every bucket over the ranks of a "shard" group
// (shard_group_size consecutive ranks, e.g. one host's GPUs) instead of over
// every rank: parameters are gathered and gradients reduce-scattered inside
// the group, and each group holds a whole copy of the parameters, the
// master weights and the moments. The groups then differ only in their
// data, so after a bucket's gradient shard is final (its reduce-scatter,
// or the last sum of per-micro-batch shards) this pass adds an all-reduce
// (average) of the shard across the "replica" group: the ranks at the same
// place in every shard group. Every rank then holds the shard of the
// average over all ranks, and the groups update identically.
//
// The gradient norm's sum of squares stays within the shard group (the
// replicas' shards are equal once all-reduced).

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Needs the gradient shards final (applyGradientBuckets and
// applyMicroBatchReduce), before appendOptimizer.
void applyReplicaAllReduce(Graph& g, const JobSpec& job);

}  // namespace tandem
