#include "engine/checkpoint/consistency.h"

#include <fmt/format.h>

#include "engine/numerics/init.h"

namespace tandem::checkpoint {

std::vector<int> replicatedBuffers(const Plan& plan, int rank) {
  std::vector<int> ids;
  const ParallelSpec& p = plan.job.parallel;
  if (p.shard_parameters) return ids;  // each rank holds its shard of everything
  const bool optimizer_replicated = !p.shard_optimizer && !p.shard_gradients;
  for (const Buffer& b : plan.forRank(rank).buffers) {
    if (!b.persistent || b.parent >= 0 || b.bytes <= 0) continue;
    const bool optimizer = b.category == TensorCategory::MasterWeight || b.category == TensorCategory::OptimizerState;
    // Every rank's all-reduce result is the same bits (NCCL's rings and
    // trees compute each element once and pass it on; the CPU reference and
    // the ranks sharing a GPU sum in rank order once for all).
    const bool gradient = b.category == TensorCategory::Gradient;
    if (b.category == TensorCategory::Parameter || ((optimizer || gradient) && optimizer_replicated))
      ids.push_back(b.id);
  }
  return ids;
}

FlipTarget flipTarget(const Plan& plan, int rank) {
  const std::vector<int> ids = replicatedBuffers(plan, rank);
  if (ids.empty()) return {};
  int chosen = ids.front();
  for (int id : ids)
    if (plan.forRank(rank).buffers.at(size_t(id)).category == TensorCategory::MasterWeight) {
      chosen = id;
      break;
    }
  const DType dt = plan.forRank(rank).buffers.at(size_t(chosen)).dtype;
  const int64_t mantissa_top = dt == DType::F32 ? 22 : dt == DType::BF16 ? 6 : 0;
  return {chosen, mantissa_top};
}

std::vector<uint64_t> replicaHashes(const Plan& plan, int rank, const BufferReader& bytes) {
  std::vector<uint64_t> out;
  for (int id : replicatedBuffers(plan, rank)) {
    const std::vector<std::byte> b = bytes(rank, id);
    out.push_back(fnv1a64(b.data(), b.size()));
  }
  return out;
}

ReplicaMismatch replicaMismatch(const std::string& group, int rank, int reference_rank, const std::string& tensor,
                                uint64_t hash, uint64_t reference_hash) {
  ReplicaMismatch m;
  m.group = group;
  m.rank = rank;
  m.reference_rank = reference_rank;
  m.tensor = tensor;
  m.line = fmt::format("replicas differ after the step: rank {}'s {} is not rank {}'s (data-parallel group "
                       "'{}'; hashes {:016x} and {:016x}): a corrupted value on one rank",
                       rank, tensor, reference_rank, group, hash, reference_hash);
  return m;
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
        return replicaMismatch(g.name, r, ref, plan.forRank(ref).buffers.at(size_t(ids[k])).name, have[k], want[k]);
      }
    }
  }
  return std::nullopt;
}

}  // namespace tandem::checkpoint
