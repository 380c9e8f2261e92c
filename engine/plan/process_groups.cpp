#include "engine/plan/process_groups.h"

#include <numeric>

#include "engine/passes/buckets.h"
#include "engine/passes/pipeline.h"

namespace tandem {

std::vector<ProcessGroup> processGroups(const JobSpec& job) {
  const int tp = job.parallel.tensor_parallel, pp = job.parallel.pipeline_parallel;
  const int dp = job.replicas(), cp = job.parallel.context_parallel;
  std::vector<ProcessGroup> groups;
  auto family = [&](const std::string& name, int count, auto&& ranks_of) {
    for (int i = 0; i < count; ++i) groups.push_back(ProcessGroup{name, ranks_of(i)});
  };
  // Data parallel: per stage and tensor-parallel place, every replica.
  family("dp", pp * tp, [&](int i) {
    std::vector<int> r;
    for (int replica = 0; replica < dp; ++replica) r.push_back(job.rankAt(i / tp, replica, i % tp));
    return r;
  });
  if (tp > 1)  // per stage and replica, every place
    family("tp", pp * dp, [&](int i) {
      std::vector<int> r(static_cast<size_t>(tp));
      std::iota(r.begin(), r.end(), job.rankAt(i / dp, i % dp, 0));
      return r;
    });
  if (cp > 1)  // per stage, sample replica and place: the replica's context-parallel ranks
    family("cp", pp * (dp / cp) * tp, [&](int i) {
      const int stage = i / (dp / cp * tp), first = (i / tp) % (dp / cp) * cp, place = i % tp;
      std::vector<int> r;
      for (int c = 0; c < cp; ++c) r.push_back(job.rankAt(stage, first + c, place));
      return r;
    });
  if (pp > 1) {
    // Per (replica, place): the two ranks across each stage boundary, every
    // stage (the norm's sum) and, tied, the first and the last stage.
    // With interleaved chunks the last stage also sends to the first
    // (boundary p - 1).
    const int places = dp * tp;
    const int boundaries = job.parallel.pipeline_chunks > 1 ? pp : pp - 1;
    for (int b = 0; b < boundaries; ++b)
      family(pipelineBoundaryGroup(b), places, [&](int i) {
        return std::vector<int>{job.rankAt(b, i / tp, i % tp), job.rankAt((b + 1) % pp, i / tp, i % tp)};
      });
    family("pipe", places, [&](int i) {
      std::vector<int> r;
      for (int s = 0; s < pp; ++s) r.push_back(job.rankAt(s, i / tp, i % tp));
      return r;
    });
    if (job.model.tied_embeddings)
      family("embed", places, [&](int i) {
        return std::vector<int>{job.rankAt(0, i / tp, i % tp), job.rankAt(pp - 1, i / tp, i % tp)};
      });
  }
  if (!hybridSharding(job)) return groups;
  // Hybrid sharding splits each data-parallel group: blocks of
  // shard_group_size consecutive replicas shard, the replicas at one place
  // of every block all-reduce; per stage and tensor-parallel place.
  const int size = job.parallel.shard_group_size;
  for (int s = 0; s < pp; ++s)
    for (int first = 0; first < dp; first += size)
      for (int place = 0; place < tp; ++place) {
        ProcessGroup shard{"shard", {}};
        for (int i = 0; i < size; ++i) shard.ranks.push_back(job.rankAt(s, first + i, place));
        groups.push_back(std::move(shard));
      }
  for (int s = 0; s < pp; ++s)
    for (int i = 0; i < size; ++i)
      for (int place = 0; place < tp; ++place) {
        ProcessGroup replica{"replica", {}};
        for (int first = i; first < dp; first += size) replica.ranks.push_back(job.rankAt(s, first, place));
        groups.push_back(std::move(replica));
      }
  return groups;
}

}  // namespace tandem
