#include "engine/checkpoint/consistency.h"

#include <fmt/format.h>

#include "engine/numerics/init.h"

namespace tandem::checkpoint {

std::vector<int> replicatedBuffers(const Plan& plan, int rank) {
  std::vector<int> ids;
  if (plan.job.parallel.shard_parameters) return ids;  // each rank holds its shard
  for (const Buffer& b : plan.forRank(rank).buffers)
    if (b.persistent && b.parent < 0 && b.bytes > 0 && b.category == TensorCategory::Parameter) ids.push_back(b.id);
  return ids;
}

std::vector<uint64_t> replicaHashes(const Plan& plan, int rank, const BufferReader& bytes) {
  std::vector<uint64_t> out;
  for (int id : replicatedBuffers(plan, rank)) {
    const std::vector<std::byte> b = bytes(rank, id);
    out.push_back(fnv1a64(b.data(), b.size()));
  }
  return out;
}

std::optional<ReplicaMismatch> checkReplicas(const Plan& plan, const BufferReader& bytes) {
  for (const ProcessGroup& g : plan.groups) {
    if (g.name != "dp" || g.ranks.size() < 2) continue;
    const int ref = g.ranks.front();
    const std::vector<uint64_t> want = replicaHashes(plan, ref, bytes);
    const std::vector<int> ids = replicatedBuffers(plan, ref);
    for (size_t i = 1; i < g.ranks.size(); ++i) {
      const int r = g.ranks[i];
      const std::vector<uint64_t> have = replicaHashes(plan, r, bytes);
      for (size_t k = 0; k < want.size() && k < have.size(); ++k) {
        if (have[k] == want[k]) continue;
        ReplicaMismatch m;
        m.group = g.name;
        m.rank = r;
        m.reference_rank = ref;
        m.tensor = plan.forRank(ref).buffers.at(size_t(ids[k])).name;
        m.line = fmt::format("replicas differ after the step: rank {}'s {} is not rank {}'s (data-parallel group "
                             "'{}'; hashes {:016x} and {:016x}): a corrupted value on one rank",
                             r, m.tensor, ref, g.name, have[k], want[k]);
        return m;
      }
    }
  }
  return std::nullopt;
}

}  // namespace tandem::checkpoint
