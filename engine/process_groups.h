#pragma once
// The process groups of a job's plan (Plan::groups).
//
// Ranks are numbered with the tensor-parallel place fastest: rank =
// replica x tensor_parallel + place, so a tensor-parallel group is a block
// of consecutive ranks (one host's GPUs in the simulator's and launchers'
// numbering), and a data-parallel group holds the ranks at one place of
// every replica.
//
// - "dp": the data-parallel groups, one per tensor-parallel place (every
//   rank when tensor_parallel is 1);
// - "tp": with tensor_parallel > 1, one group per replica;
// - "shard" and "replica": with hybrid sharding, per tensor-parallel place,
//   one "shard" group per block of shard_group_size consecutive replicas and
//   one "replica" group per place in a block (engine/pass_hybrid_shard.h).
//
// Groups of one name partition the ranks; a collective names the family
// and runs in the member that contains the rank.

#include <vector>

#include "engine/job.h"
#include "engine/plan.h"

namespace tandem {

std::vector<ProcessGroup> processGroups(const JobSpec& job);

}  // namespace tandem
