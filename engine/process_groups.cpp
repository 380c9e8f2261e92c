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
  const int size = job.parallel.shard_group_size;
  for (int first = 0; first < world; first += size) {
    ProcessGroup shard{"shard", std::vector<int>(size_t(size))};
    std::iota(shard.ranks.begin(), shard.ranks.end(), first);
    groups.push_back(shard);
  }
  for (int place = 0; place < size; ++place) {
    ProcessGroup replica{"replica", {}};
    for (int r = place; r < world; r += size) replica.ranks.push_back(r);
    groups.push_back(replica);
  }
  return groups;
}

}  // namespace tandem
