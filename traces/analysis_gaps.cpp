// Where the GPU sits idle: the gaps in the union of a rank's GPU work
// (compute, communication, copies; not host calls or synchronization),
// each charged to the pair of activities around it: the one that ended
// last before the gap and the one that starts it. Kernels and collectives
// of plan tasks go by their op ("add -> matmul"); other work by its name.
// Inside recorded steps only, where a rank has them: the set-up before the
// first step (GEMM algorithm timing, the first copies) is not the steps'
// idle time.
//
// Each track is already in start order, so a rank's activities are merged
// across its tracks (a heap of one cursor per track), not sorted, and
// labels stay small integers until the report names the largest pairs: the
// report's 10M-activity budget (docs/benchmarks.md) has no room for a
// string per activity.
#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

#include "traces/analysis_parts.h"

namespace tandem::traces::detail {

namespace {

// A kernel's name as CUPTI records it can run to hundreds of characters.
std::string shortName(const std::string& s) { return s.size() > 40 ? s.substr(0, 37) + "..." : s; }

}  // namespace

IdleGaps idleGaps(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                  const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                  const std::vector<StepRow>& steps, size_t max_pairs) {
  // Labels: 0 .. ops-1 the plan's ops, ops + name id the activity names.
  std::vector<std::string> ops;
  std::unordered_map<std::string, int32_t> op_id;
  std::unordered_map<int64_t, int32_t> op_of_task;  // (rank << 40 | task) -> op label
  for (const auto& t : plan) {
    if (t.op.empty()) continue;
    auto [it, fresh] = op_id.emplace(t.op, int32_t(ops.size()));
    if (fresh) ops.push_back(t.op);
    op_of_task.emplace((int64_t(t.rank) << 40) | t.task_id, it->second);
  }
  const int32_t name_base = int32_t(ops.size());
  auto labelText = [&](int32_t label) {
    return label < name_base ? ops[size_t(label)] : shortName(strings[size_t(label - name_base)]);
  };

  IdleGaps out;
  struct Sum {
    int64_t count = 0, total_ns = 0;
  };
  std::map<std::pair<int32_t, int32_t>, Sum> pairs;
  for (const RankTracks& rank : ranks) {
    std::vector<std::pair<int64_t, int64_t>> windows;
    for (const StepRow& s : steps)
      if (s.rank == rank.rank) windows.emplace_back(s.start_ns, s.end_ns);
    std::sort(windows.begin(), windows.end());
    out.steps += static_cast<int64_t>(windows.size());
    auto inSteps = [&](int64_t t) {
      if (windows.empty()) return true;
      auto it = std::upper_bound(windows.begin(), windows.end(), std::make_pair(t, INT64_MAX));
      return it != windows.begin() && t < std::prev(it)->second;
    };
    // One cursor per track, the earliest start first.
    using Cursor = std::pair<int64_t, size_t>;  // (start, track index)
    std::priority_queue<Cursor, std::vector<Cursor>, std::greater<Cursor>> heap;
    std::vector<size_t> next(rank.tracks.size(), 0);
    auto isWork = [&](const Track* t, size_t i) {
      const Category c = categories.of(t->kind[i], t->name[i]);
      return c != Category::Host && c != Category::Sync;
    };
    auto advance = [&](size_t k) {  // to the track's next piece of GPU work
      const Track* t = rank.tracks[k];
      while (next[k] < t->size() && !isWork(t, next[k])) ++next[k];
      if (next[k] < t->size()) heap.emplace(t->start_ns[next[k]], k);
    };
    for (size_t k = 0; k < rank.tracks.size(); ++k) advance(k);
    bool any = false;
    int64_t last_end = 0;
    int32_t last_label = 0;
    while (!heap.empty()) {
      const size_t k = heap.top().second;
      heap.pop();
      const Track* t = rank.tracks[k];
      const size_t i = next[k]++;
      advance(k);
      int32_t label = name_base + t->name[i];
      if (t->task_id[i] >= 0 && (t->kind[i] == ActivityKind::Kernel || t->kind[i] == ActivityKind::Collective)) {
        auto it = op_of_task.find((int64_t(rank.rank) << 40) | t->task_id[i]);
        if (it != op_of_task.end()) label = it->second;
      }
      if (any && t->start_ns[i] > last_end && inSteps(last_end)) {
        Sum& s = pairs[{last_label, label}];
        ++s.count;
        s.total_ns += t->start_ns[i] - last_end;
        ++out.gaps;
        out.total_ns += t->start_ns[i] - last_end;
      }
      if (!any || t->end_ns[i] > last_end) last_end = t->end_ns[i], last_label = label;
      any = true;
    }
  }
  for (const auto& [key, s] : pairs)
    out.pairs.push_back({labelText(key.first), labelText(key.second), s.count, s.total_ns});
  std::sort(out.pairs.begin(), out.pairs.end(), [](const IdleGapPair& a, const IdleGapPair& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.before != b.before ? a.before < b.before : a.after < b.after;
  });
  out.pair_kinds = static_cast<int64_t>(out.pairs.size());
  if (out.pairs.size() > max_pairs) out.pairs.resize(max_pairs);
  return out;
}

}  // namespace tandem::traces::detail
