#pragma once
// Consistency across replicas (issue 51, the gradient-hash check of the
// seeds): ranks of a data-parallel group must hold bit-identical parameters
// after every step. A bit flipped by a faulty GPU, a lost NCCL message or a
// nondeterministic kernel on one rank makes them drift apart silently, and
// the run trains on. Every N steps each rank hashes its replicated
// parameters and the hashes are compared; a mismatch names the group, the
// ranks and the first tensor that differs.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem::checkpoint {

struct ReplicaMismatch {
  std::string group;        // "dp"
  int rank = -1, reference_rank = -1;
  std::string tensor;       // the first buffer (in id order) whose bytes differ
  std::string line;         // one line saying all of it
};

// The buffers every member of a data-parallel group holds alike: the
// parameters, unless they are sharded (ZeRO-3, nothing to compare then);
// the master weights and AdamW's moments unless the optimizer is sharded
// (ZeRO-1 and up: each rank holds its own shard of them); and the reduced
// gradients (the step's all-reduced buckets, still in place after it) when
// nothing is sharded (a reduce-scatter leaves each rank its own shard
// reduced). In buffer id order.
std::vector<int> replicatedBuffers(const Plan& plan, int rank);

// Where a test's flipped bit goes (TANDEM_TEST_FLIP_BIT): the first
// replicated buffer that carries over to later steps as it is, a master
// weight where the parameters are its bf16 copy (rewritten from it by the
// next AdamW, which would erase the fault), else a parameter; and in it the
// top mantissa bit of the first element (a last-place bit can vanish in the
// next update's rounding). buffer -1: nothing replicated.
struct FlipTarget {
  int buffer = -1;
  int64_t bit = 0;
};
FlipTarget flipTarget(const Plan& plan, int rank);

// FNV-1a 64 of each replicated buffer of `rank`, in replicatedBuffers'
// order; `bytes(rank, buffer)` reads a buffer as the executor holds it.
using BufferReader = std::function<std::vector<std::byte>(int rank, int buffer)>;
std::vector<uint64_t> replicaHashes(const Plan& plan, int rank, const BufferReader& bytes);

// The mismatch of `rank`'s buffer `tensor` against the group's first member,
// with the line that says it (hashes as each side computed them).
ReplicaMismatch replicaMismatch(const std::string& group, int rank, int reference_rank, const std::string& tensor,
                                uint64_t hash, uint64_t reference_hash);

// Compares the hashes of the members of every data-parallel group
// (process groups named "dp"), each against the group's first member.
std::optional<ReplicaMismatch> checkReplicas(const Plan& plan, const BufferReader& bytes);

}  // namespace tandem::checkpoint
