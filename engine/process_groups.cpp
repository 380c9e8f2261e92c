#include "engine/process_groups.h"

#include <numeric>

#include "engine/pass_buckets.h"

namespace tandem {

std::vector<ProcessGroup> processGroups(const JobSpec& job) {
  const int tp = job.parallel.tensor_parallel, world = job.worldSize();
  std::vector<ProcessGroup> groups;
  for (int place = 0; place < tp; ++place) {
    ProcessGroup dp{"dp", {}};
    for (int r = place; r < world; r += tp) dp.ranks.push_back(r);
    groups.push_back(std::move(dp));
  }
  if (tp > 1)
    for (int first = 0; first < world; first += tp) {
      ProcessGroup group{"tp", std::vector<int>(size_t(tp))};
      std::iota(group.ranks.begin(), group.ranks.end(), first);
      groups.push_back(std::move(group));
    }
  if (!hybridSharding(job)) return groups;
  // Hybrid sharding splits each data-parallel group: blocks of
  // shard_group_size consecutive replicas shard, the replicas at one place
  // of every block all-reduce; per tensor-parallel place.
  const int size = job.parallel.shard_group_size, replicas = job.parallel.data_parallel;
  for (int first = 0; first < replicas; first += size)
    for (int place = 0; place < tp; ++place) {
      ProcessGroup shard{"shard", {}};
      for (int i = 0; i < size; ++i) shard.ranks.push_back((first + i) * tp + place);
      groups.push_back(std::move(shard));
    }
  for (int i = 0; i < size; ++i)
    for (int place = 0; place < tp; ++place) {
      ProcessGroup replica{"replica", {}};
      for (int first = i; first < replicas; first += size) replica.ranks.push_back(first * tp + place);
      groups.push_back(std::move(replica));
    }
  return groups;
}

}  // namespace tandem
