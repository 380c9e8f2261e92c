// Where the GPU sits idle: the gaps in the union of a rank's GPU work
// (compute, communication, copies; not host calls or synchronization),
// each charged to the pair of activities around it: the one that ended
// last before the gap and the one that starts it. Kernels and collectives
// of plan tasks go by their op ("add -> matmul"); other work by its name.
// Inside recorded steps only, where a rank has them: the set-up before the
// first step (GEMM algorithm timing, the first copies) is not the steps'
// idle time.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "traces/analysis_parts.h"

namespace tandem::traces::detail {

namespace {

struct Work {
  int64_t start = 0, end = 0;
  std::string label;
};

// A kernel's name as CUPTI records it can run to hundreds of characters.
std::string shortName(const std::string& s) { return s.size() > 40 ? s.substr(0, 37) + "..." : s; }

}  // namespace

IdleGaps idleGaps(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                  const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                  const std::vector<StepRow>& steps, size_t max_pairs) {
  std::unordered_map<int64_t, const std::string*> op_of_task;  // (rank << 40 | task) -> op
  for (const auto& t : plan) op_of_task.emplace((int64_t(t.rank) << 40) | t.task_id, &t.op);
  IdleGaps out;
  std::map<std::pair<std::string, std::string>, IdleGapPair> pairs;
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
    std::vector<Work> work;
    for (const Track* t : rank.tracks)
      for (size_t i = 0; i < t->size(); ++i) {
        const Category c = categories.of(t->kind[i], t->name[i]);
        if (c == Category::Host || c == Category::Sync) continue;
        Work w{t->start_ns[i], t->end_ns[i], {}};
        const bool task_work = t->kind[i] == ActivityKind::Kernel || t->kind[i] == ActivityKind::Collective;
        auto it = t->task_id[i] >= 0 && task_work ? op_of_task.find((int64_t(rank.rank) << 40) | t->task_id[i])
                                                  : op_of_task.end();
        w.label = it != op_of_task.end() && !it->second->empty() ? *it->second
                                                                  : shortName(strings[static_cast<size_t>(t->name[i])]);
        work.push_back(std::move(w));
      }
    std::sort(work.begin(), work.end(), [](const Work& a, const Work& b) {
      return a.start != b.start ? a.start < b.start : a.end < b.end;
    });
    // Walk the union: `last` is the activity that ends latest so far.
    size_t last = SIZE_MAX;
    for (size_t k = 0; k < work.size(); ++k) {
      if (last != SIZE_MAX && work[k].start > work[last].end && inSteps(work[last].end)) {
        const int64_t gap = work[k].start - work[last].end;
        IdleGapPair& p = pairs[{work[last].label, work[k].label}];
        p.before = work[last].label;
        p.after = work[k].label;
        ++p.count;
        p.total_ns += gap;
        ++out.gaps;
        out.total_ns += gap;
      }
      if (last == SIZE_MAX || work[k].end > work[last].end) last = k;
    }
  }
  for (auto& [key, p] : pairs) out.pairs.push_back(std::move(p));
  std::sort(out.pairs.begin(), out.pairs.end(), [](const IdleGapPair& a, const IdleGapPair& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.before != b.before ? a.before < b.before : a.after < b.after;
  });
  out.pair_kinds = static_cast<int64_t>(out.pairs.size());
  if (out.pairs.size() > max_pairs) out.pairs.resize(max_pairs);
  return out;
}

}  // namespace tandem::traces::detail
