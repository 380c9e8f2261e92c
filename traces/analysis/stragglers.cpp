// Stragglers: which rank enters collectives last.
//
// The same collective is matched across ranks by its plan task id, or, when
// activities carry none, by its name and how many times that name occurred
// before on the rank. A rank's delay in a collective is its start minus the
// earliest start of that collective on any rank.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "traces/analysis/parts.h"

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
  // (key, rank, start) entries, sorted so that each collective's entries are
  // adjacent and a rank's earliest entry comes first: a rank that split a
  // collective over several activities entered it at its first one.
  struct Entry {
    Key key;
    int rank;
    int64_t start;
  };
  std::vector<Entry> entries;
  if (!collectives.empty()) {
    std::map<std::pair<int, int64_t>, int64_t> seen;
    std::map<std::string, int64_t> codes;
    for (const auto& c : collectives) {
      int64_t name = codes.emplace(c.group + "/" + c.op, static_cast<int64_t>(codes.size())).first->second;
      Key k = c.task_id >= 0 ? Key{c.task_id, 0, 0} : Key{-1, name, seen[{c.rank, name}]++};
      entries.push_back({k, c.rank, c.start_ns});
    }
  } else {
    for (const auto& rank : ranks) {
      std::unordered_map<int32_t, int64_t> seen;
      // Several comm streams: occurrence order follows start time across them.
      std::vector<std::tuple<int64_t, int64_t, int32_t>> comm;  // start, task, name
      for (const Track* t : rank.tracks)
        for (size_t i = 0; i < t->size(); ++i)
          if (categories.of(t->kind[i], t->name[i]) == Category::Comm)
            comm.emplace_back(t->start_ns[i], t->task_id[i], t->name[i]);
      std::sort(comm.begin(), comm.end());
      for (const auto& [start, task, name] : comm) {
        Key k = task >= 0 ? Key{task, 0, 0} : Key{-1, name, seen[name]++};
        entries.push_back({k, rank.rank, start});
      }
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.key < b.key) return true;
    if (b.key < a.key) return false;
    return a.rank != b.rank ? a.rank < b.rank : a.start < b.start;
  });
  std::map<int, StragglerRank> per_rank;
  std::map<int, int64_t> delay_sum, count;
  Stragglers out;
  std::vector<std::pair<int, int64_t>> first;  // rank, first start
  for (size_t i = 0; i < entries.size();) {
    size_t j = i;
    first.clear();
    for (; j < entries.size() && !(entries[i].key < entries[j].key); ++j)
      if (first.empty() || first.back().first != entries[j].rank) first.emplace_back(entries[j].rank, entries[j].start);
    i = j;
    if (first.size() < 2) continue;
    ++out.collectives_matched;
    int64_t earliest = INT64_MAX, latest = INT64_MIN;
    int last_rank = -1;
    for (auto [r, st] : first) {
      earliest = std::min(earliest, st);
      if (st > latest) latest = st, last_rank = r;
    }
    for (auto [r, st] : first) {
      auto& pr = per_rank[r];
      pr.rank = r;
      delay_sum[r] += st - earliest;
      ++count[r];
      pr.max_delay_ns = std::max(pr.max_delay_ns, st - earliest);
    }
    if (latest > earliest) ++per_rank[last_rank].last_count;
  }
  int64_t best = 0;
  for (auto& [r, pr] : per_rank) {
    pr.mean_delay_ns = static_cast<double>(delay_sum[r]) / static_cast<double>(count[r]);
    if (pr.last_count > best) best = pr.last_count, out.straggler_rank = r;
    out.ranks.push_back(pr);
  }
  return out;
}

}  // namespace tandem::traces::detail
