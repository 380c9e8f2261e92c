// Stragglers: which rank enters collectives last.
//
// The same collective is matched across ranks by its plan task id, or, when
// activities carry none, by its name and how many times that name occurred
// before on the rank. A rank's delay in a collective is its start minus the
// earliest start of that collective on any rank.
#include <algorithm>
#include <map>

#include "traces/analysis_parts.h"

namespace tandem::traces::detail {

namespace {

struct Key {
  int64_t task_id;  // >= 0 when matched by task
  int64_t name;     // name code when matched by occurrence
  int64_t occurrence;
  bool operator<(const Key& o) const {
    return std::tie(task_id, name, occurrence) < std::tie(o.task_id, o.name, o.occurrence);
  }
};

}  // namespace

Stragglers stragglers(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                      const std::vector<CollectiveRow>& collectives) {
  std::map<Key, std::vector<std::pair<int, int64_t>>> groups;  // rank, start
  if (!collectives.empty()) {
    std::map<std::pair<int, int64_t>, int64_t> seen;
    std::map<std::string, int64_t> codes;
    for (const auto& c : collectives) {
      int64_t name = codes.emplace(c.group + "/" + c.op, static_cast<int64_t>(codes.size())).first->second;
      Key k = c.task_id >= 0 ? Key{c.task_id, 0, 0} : Key{-1, name, seen[{c.rank, name}]++};
      groups[k].emplace_back(c.rank, c.start_ns);
    }
  } else {
    for (const auto& rank : ranks) {
      std::map<int32_t, int64_t> seen;
      // Several comm streams: occurrence order follows start time across them.
      std::vector<std::tuple<int64_t, int64_t, int32_t>> comm;  // start, task, name
      for (const Track* t : rank.tracks)
        for (size_t i = 0; i < t->size(); ++i)
          if (categories.of(t->kind[i], t->name[i]) == Category::Comm)
            comm.emplace_back(t->start_ns[i], t->task_id[i], t->name[i]);
      std::sort(comm.begin(), comm.end());
      for (const auto& [start, task, name] : comm) {
        Key k = task >= 0 ? Key{task, 0, 0} : Key{-1, name, seen[name]++};
        groups[k].emplace_back(rank.rank, start);
      }
    }
  }
  std::map<int, StragglerRank> per_rank;
  std::map<int, int64_t> delay_sum;
  Stragglers out;
  for (auto& [key, members] : groups) {
    // One entry per rank: a rank that split a collective over several
    // activities entered it at its first one.
    std::map<int, int64_t> first;
    for (auto [r, s] : members) {
      auto it = first.find(r);
      if (it == first.end() || s < it->second) first[r] = s;
    }
    if (first.size() < 2) continue;
    ++out.collectives_matched;
    int64_t earliest = INT64_MAX, latest = INT64_MIN;
    int last_rank = -1;
    for (auto [r, s] : first) {
      earliest = std::min(earliest, s);
      if (s > latest) latest = s, last_rank = r;
    }
    for (auto [r, s] : first) {
      auto& pr = per_rank[r];
      pr.rank = r;
      delay_sum[r] += s - earliest;
      pr.max_delay_ns = std::max(pr.max_delay_ns, s - earliest);
      pr.mean_delay_ns += 1;  // counts collectives for now, divided below
    }
    if (latest > earliest) ++per_rank[last_rank].last_count;
  }
  int64_t best = 0;
  for (auto& [r, pr] : per_rank) {
    pr.mean_delay_ns = pr.mean_delay_ns > 0 ? static_cast<double>(delay_sum[r]) / pr.mean_delay_ns : 0.0;
    if (pr.last_count > best) best = pr.last_count, out.straggler_rank = r;
    out.ranks.push_back(pr);
  }
  return out;
}

}  // namespace tandem::traces::detail
