#pragma once
// The process groups of a job's plan (Plan::groups).
//
// Ranks are numbered with the tensor-parallel place fastest and the
// pipeline stage slowest: rank = (stage x replicas + replica) x
// tensor_parallel + place (JobSpec::rankAt), so a tensor-parallel group is
// a block of consecutive ranks (one host's GPUs in the simulator's and
// launchers' numbering), a data-parallel group holds the ranks at one place
// of every replica of a stage, and a stage is a block of ranks. With
// context parallelism a sample replica is context_parallel consecutive
// replicas.
//
// - "dp": the data-parallel groups, one per stage and tensor-parallel place
//   (every rank with neither tensor nor pipeline parallelism); with
//   context parallelism they hold every context-parallel rank too (all
//   average their gradients);
// - "tp": with tensor_parallel > 1, one group per stage and replica;
// - "cp": with context_parallel > 1, one group per stage, sample replica
//   and tensor-parallel place (the attention's key/value gathers);
// - "pp<b>", "pipe" and "embed": with pipeline_parallel > 1, per (replica,
//   place), the two ranks across the boundary between stages b and b + 1
//   (with interleaved chunks also "pp<p-1>": the last stage and the first),
//   every stage's rank, and (tied embeddings) the first and the last
//   stage's (engine/passes/pipeline.h);
// - "shard" and "replica": with hybrid sharding, per stage and tensor-parallel place,
//   one "shard" group per block of shard_group_size consecutive replicas and
//   one "replica" group per place in a block (engine/passes/hybrid_shard.h).
//
// Groups of one name partition the ranks; a collective names the family
// and runs in the member that contains the rank.

#include <vector>

#include "engine/plan/plan.h"
#include "engine/spec/job.h"

namespace tandem {

std::vector<ProcessGroup> processGroups(const JobSpec& job);

}  // namespace tandem
