// Critical path through the plan's dependency graph, from observed task times.
//
// A plan's task ids repeat in every step, so the path is taken within one
// step: each rank's median step by duration (a typical step; the slowest
// could be a warm-up or a hiccup). A rank without recorded steps is taken
// whole. A task's observed interval spans all its activities in that window. Its predecessors are
// the tasks it depends on in the plan plus the previous task on its stream
// (streams are FIFO). Walking back from the task that ends last, each step
// goes to the predecessor that finished last: that is the dependency the task
// actually waited for, so the path explains the step time.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "traces/analysis/parts.h"

namespace tandem::traces::detail {

namespace {

struct Node {
  int64_t task_id = -1;
  int64_t start_ns = INT64_MAX;
  int64_t end_ns = INT64_MIN;
  int stream = 0;
  int32_t name = -1;  // first activity's name
  Phase phase = Phase::None;
  Category category = Category::Compute;
  std::vector<size_t> preds;
};

// The rank's median step by duration (the lower middle of an even count),
// or null when it has none.
const StepRow* medianStep(const std::vector<StepRow>& steps, int rank, int64_t& count) {
  std::vector<const StepRow*> mine;
  for (const StepRow& s : steps)
    if (s.rank == rank) mine.push_back(&s);
  count = static_cast<int64_t>(mine.size());
  if (mine.empty()) return nullptr;
  std::sort(mine.begin(), mine.end(), [](const StepRow* a, const StepRow* b) {
    const int64_t da = a->end_ns - a->start_ns, db = b->end_ns - b->start_ns;
    return da != db ? da < db : a->step < b->step;
  });
  return mine[(mine.size() - 1) / 2];
}

CriticalPath pathOfRank(const RankTracks& rank, const CategoryTable& categories,
                        const std::vector<std::string>& strings,
                        const std::unordered_map<int64_t, const PlanTaskRow*>& plan, const std::vector<StepRow>& steps,
                        size_t max_tasks) {
  CriticalPath cp;
  const StepRow* step = medianStep(steps, rank.rank, cp.steps_recorded);
  const int64_t window_start = step ? step->start_ns : INT64_MIN, window_end = step ? step->end_ns : INT64_MAX;
  cp.step = step ? step->step : -1;
  std::vector<Node> nodes;
  std::unordered_map<int64_t, size_t> index;
  for (const Track* t : rank.tracks) {
    for (size_t i = 0; i < t->size(); ++i) {
      if (t->task_id[i] < 0) continue;
      if (t->start_ns[i] < window_start || t->start_ns[i] >= window_end) continue;
      Category c = categories.of(t->kind[i], t->name[i]);
      if (c == Category::Host) continue;
      auto [it, fresh] = index.emplace(t->task_id[i], nodes.size());
      if (fresh) {
        Node n;
        n.task_id = t->task_id[i];
        n.stream = t->stream;
        n.name = t->name[i];
        n.phase = t->phase[i];
        n.category = c;
        nodes.push_back(n);
      }
      Node& n = nodes[it->second];
      n.start_ns = std::min(n.start_ns, t->start_ns[i]);
      n.end_ns = std::max(n.end_ns, t->end_ns[i]);
    }
  }
  if (nodes.empty()) return cp;
  // Stream order: the previous task on the same stream by start time.
  std::vector<size_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return nodes[a].start_ns != nodes[b].start_ns ? nodes[a].start_ns < nodes[b].start_ns
                                                  : nodes[a].task_id < nodes[b].task_id;
  });
  std::unordered_map<int, size_t> last_on_stream;
  for (size_t k : order) {
    auto it = last_on_stream.find(nodes[k].stream);
    if (it != last_on_stream.end()) nodes[k].preds.push_back(it->second);
    last_on_stream[nodes[k].stream] = k;
    auto p = plan.find(nodes[k].task_id);
    if (p == plan.end()) continue;
    for (int64_t dep : p->second->deps) {
      auto d = index.find(dep);
      if (d != index.end() && d->second != k) nodes[k].preds.push_back(d->second);
    }
  }
  size_t cur = 0;
  for (size_t k = 1; k < nodes.size(); ++k)
    if (nodes[k].end_ns > nodes[cur].end_ns) cur = k;
  std::vector<std::pair<size_t, int64_t>> path;  // node, wait before it
  std::unordered_set<size_t> seen;
  while (true) {
    seen.insert(cur);
    const Node& n = nodes[cur];
    size_t best = SIZE_MAX;
    for (size_t p : n.preds) {
      // A predecessor must start before the task (guards against cycles from
      // inconsistent input) and be the one that finished last.
      if (seen.count(p) || nodes[p].start_ns > n.start_ns) continue;
      if (best == SIZE_MAX || nodes[p].end_ns > nodes[best].end_ns) best = p;
    }
    int64_t wait = best == SIZE_MAX ? 0 : std::max<int64_t>(0, n.start_ns - nodes[best].end_ns);
    path.emplace_back(cur, wait);
    if (best == SIZE_MAX) break;
    cur = best;
  }
  std::reverse(path.begin(), path.end());
  cp.available = true;
  cp.rank = rank.rank;
  cp.length_ns = nodes[path.back().first].end_ns - nodes[path.front().first].start_ns;
  cp.task_count = static_cast<int64_t>(path.size());
  for (size_t k = 0; k < path.size(); ++k) {
    const Node& n = nodes[path[k].first];
    int64_t dur = n.end_ns - n.start_ns;
    cp.busy_ns += dur;
    cp.wait_ns += path[k].second;
    cp.by_phase_ns[n.phase == Phase::None ? "none" : std::string(toString(n.phase))] += dur;
    cp.by_category_ns[std::string(toString(n.category))] += dur;
    if (path.size() - k > max_tasks) continue;
    CriticalTask t;
    t.task_id = n.task_id;
    auto p = plan.find(n.task_id);
    t.name = p != plan.end() && !p->second->name.empty() ? p->second->name : strings[static_cast<size_t>(n.name)];
    t.phase = std::string(toString(n.phase));
    t.stream = n.stream;
    t.start_ns = n.start_ns;
    t.end_ns = n.end_ns;
    t.wait_before_ns = path[k].second;
    cp.tasks.push_back(std::move(t));
  }
  return cp;
}

}  // namespace

CriticalPath criticalPath(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                          const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                          const std::vector<StepRow>& steps, size_t max_tasks) {
  CriticalPath best;
  for (const auto& rank : ranks) {
    std::unordered_map<int64_t, const PlanTaskRow*> tasks;
    for (const auto& t : plan)
      if (t.rank == rank.rank) tasks.emplace(t.task_id, &t);
    CriticalPath cp = pathOfRank(rank, categories, strings, tasks, steps, max_tasks);
    if (cp.available && (!best.available || cp.length_ns > best.length_ns)) best = std::move(cp);
  }
  return best;
}

}  // namespace tandem::traces::detail
