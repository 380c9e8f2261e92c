#pragma once
// Gradient buckets and data-parallel all-reduce.
//
// Parameter gradients are grouped in the order the backward completes them
// (reverse layer order), into buckets of comm.bucket_mib (the first one
// comm.first_bucket_mib, so communication starts early). Each bucket is one
// flat gradient tensor and every gradient is a view into it, so one
// collective covers the bucket. With data_parallel > 1 an all-reduce (average)
// of the bucket is issued on the comm stream right after the node that
// completes the bucket on the last micro-batch; earlier micro-batches only
// accumulate (gradient accumulation).

#include <optional>
#include <string>
#include <string_view>

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

void applyGradientBuckets(Graph& g, const JobSpec& job);

// Gradient norm and one AdamW node per bucket, after every all-reduce.
// Sharded (ZeRO-1): reduce-scatters instead of all-reduces, a sum of the
// ranks' squared norms, and after each bucket's AdamW an all-gather of its
// parameters on the comm stream. With schedule.optimizer_beside_forward
// (unsharded), the AdamW nodes open the graph instead, last bucket first
// (attrs.from_previous_step): each step applies the previous step's
// gradients beside its forward; lowering puts them on a compute stream of
// their own.
void appendOptimizer(Graph& g, const JobSpec& job);

// comm.grad_reduce_fp32: every reduction of bf16 gradients across ranks
// (all-reduce or reduce-scatter of a gradient tensor) moves fp32, its
// collective counted at four bytes an element. The gradient buffers stay
// bf16 (the up-cast before and the down-cast after are not planned).
// Needs the gradient collectives in place (after applyGradientBuckets and
// the passes that add reductions).
void applyGradientReduceInFp32(Graph& g, const JobSpec& job);
// Why `runner` (an executor) cannot run the job: comm.grad_reduce_fp32 in
// a job whose gradients are bf16 and reduced across ranks; nothing
// otherwise.
std::optional<std::string> gradReduceFp32Refusal(const JobSpec& job, std::string_view runner);

// True when the job shards the optimizer over more than one rank (also
// implied by sharding the parameters).
bool shardsOptimizer(const JobSpec& job);
// True when the job keeps its gradients as shards (ZeRO-2, and ZeRO-3,
// which shards them too), also over one rank.
bool shardsGradients(const JobSpec& job);
// True when the job shards the parameters (ZeRO-3), also over one rank:
// one shard of everything, no memory saved, the sharded schedule run (the
// GPU tests run it on one GPU).
bool shardsParameters(const JobSpec& job);
// Hybrid sharding (parallel.shard_group_size below data_parallel): buckets
// are sharded within groups of consecutive ranks, the "shard" groups, and
// the groups' gradient shards all-reduced across them, in the "replica"
// groups (the ranks holding the same shard).
bool hybridSharding(const JobSpec& job);
// How many ranks a sharded bucket is split over, and the process group its
// sharded collectives run in ("shard" with hybrid sharding, else "dp").
int shardCount(const JobSpec& job);
std::string shardGroup(const JobSpec& job);

// A collective over a data-parallel group (by default every rank) of
// `count` elements of `dt`.
CollectiveInfo dataParallelCollective(CollectiveOp op, ReduceOp reduce, int64_t count, DType dt,
                                      std::string group = "dp");

// An in-place all-reduce of tensor `t` over the rank's member of the group
// family `group` (a gradient shard across replicas, the tied embedding's
// gradient across stages, an input gradient across a tensor-parallel
// group, the gradient norm's sum of squares).
Node inPlaceAllReduce(const Graph& g, int t, std::string name, ReduceOp reduce, std::string group, Phase phase,
                      StreamKind stream, int micro_batch);

}  // namespace tandem
