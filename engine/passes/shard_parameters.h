#pragma once
// Sharded parameters (ZeRO stage 3, FSDP's FULL_SHARD): between uses each
// rank keeps only its shard of every bucket's parameters.
//
// The sharded optimizer (pass_buckets.h) already lays every bucket's
// parameters out as one flat tensor like its gradients and updates one
// shard of it per rank. With job.parallel.shard_parameters the flat tensor
// is no longer persistent: the rank keeps its shard (persistent,
// GradBucket::param_shard), AdamW writes the updated shard there, and every
// use of a bucket's parameters reads a gathered copy, one per micro-batch
// and direction:
//   - the forward of micro-batch m reads `param.bucketB.fwd.mbM`,
//   - its backward and recompute read `param.bucketB.bwd.mbM`,
// each filled by an all-gather of the shards on the comm stream and freed
// by the memory plan after its last reader. The copy for micro-batch 0's
// forward is the flat tensor itself, so the parameters' own buffers
// (ParamInfo::param) are views into it; the other copies get views of
// their own, laid out alike, and the tasks read those instead.
//
// Each all-gather is issued where the compute stream reaches the first use
// of the copy before it (in issue order), so one copy is gathered ahead
// while the previous one is in use, and at most about two are live besides
// those a task reads at once; schedule.gather_ahead = N issues it at the
// first use of the copy N before it instead. Lowering keeps a transient buffer written on
// another stream from being written before the compute stream has issued
// up to that point (engine/plan/lower.cpp), which is what makes the early
// gather safe next to the memory plan's reuse.
//
// The gradients are sharded as well (pass_buckets.cpp): each bucket's whole
// gradient is transient, from its first gradient to its reduce-scatter,
// which writes this rank's average out of place into a shard
// (GradBucket::grad_shard) that the norm and AdamW read. With gradient
// accumulation the whole bucket still lives across the micro-batches (one
// reduce-scatter, on the last); reduce-scattering every micro-batch into
// the shard would free it sooner for more communication.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Needs applyGradientBuckets and appendOptimizer first; nothing happens
// unless shardsParameters(job).
void applyParameterSharding(Graph& g, const JobSpec& job);

}  // namespace tandem
