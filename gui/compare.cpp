#include "gui/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "gui/slice_stats.h"
#include "gui/timeline_math.h"

namespace tandem::gui {

namespace {

struct Acc {
  int32_t task_id = -1;
  int64_t count = 0;
  int64_t total_ns = 0;
  int32_t name = -1;
  uint8_t phase = 0;
  const std::string* stream = nullptr;  // the track's label: the stream's name ("compute.wgrad")
};

// Keyed by the plan task's name (a real run's activities carry kernel
// names; the plan rows give the task's): unique per rank within a plan, and
// stable across plans whose task ids differ (another recompute policy
// inserts tasks). Runs without plan rows go by the activity's name. Only
// activities inside the recorded steps count, where a run has steps: a real
// run's set-up runs tasks' kernels too.
std::map<std::string, Acc> perTask(const TimelineData& d, int rank) {
  std::map<std::string, Acc> out;
  for (const Track& t : d.tracks) {
    if (t.rank != rank) continue;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.task_id[i] < 0) continue;
      if (!d.steps.empty() && d.stepAt(t.start_ns[i]) < 0) continue;
      const int32_t name = d.taskNameId(t, i);
      Acc& a = out[d.names[size_t(name)]];
      a.task_id = t.task_id[i];
      a.count += 1;
      a.total_ns += t.end_ns[i] - t.start_ns[i];
      a.name = name;
      a.phase = t.phase[i];
      a.stream = &t.label;
    }
  }
  return out;
}

const RankBreakdown* breakdownOf(const std::vector<RankBreakdown>& rows, int rank) {
  for (const auto& r : rows)
    if (r.rank == rank) return &r;
  return nullptr;
}

double stepNs(const TimelineData& d) {
  if (d.steps.empty()) return double(d.end_ns - d.begin_ns);
  double total = 0;
  for (const auto& s : d.steps) total += double(s.end_ns - s.start_ns);
  return total / double(d.steps.size());
}

std::string signedMs(double ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.2f ms", ns / 1e6);
  return buf;
}

}  // namespace

Comparison compareRuns(const TimelineData& a, const std::vector<RankBreakdown>& a_breakdown, const TimelineData& b,
                       const std::vector<RankBreakdown>& b_breakdown, int rank) {
  Comparison c;
  const auto ta = perTask(a, rank);
  const auto tb = perTask(b, rank);
  const double steps_a = double(std::max<size_t>(1, a.steps.size()));
  const double steps_b = double(std::max<size_t>(1, b.steps.size()));
  for (const auto& [id, x] : ta) {
    auto it = tb.find(id);
    if (it == tb.end()) {
      ++c.only_a;
      continue;
    }
    const Acc& y = it->second;
    TaskDelta d;
    d.task_id = y.task_id;
    d.name = id;
    d.phase = phaseName(x.phase);
    // By name: two compute streams (the weight gradients') have one kind.
    d.stream = x.stream ? *x.stream : std::string();
    d.count_a = x.count;
    d.count_b = y.count;
    d.mean_a_ns = double(x.total_ns) / steps_a;
    d.mean_b_ns = double(y.total_ns) / steps_b;
    c.tasks.push_back(std::move(d));
  }
  for (const auto& [id, y] : tb)
    if (!ta.count(id)) ++c.only_b;
  c.matched = int64_t(c.tasks.size());
  std::stable_sort(c.tasks.begin(), c.tasks.end(), [](const TaskDelta& x, const TaskDelta& y) {
    return std::fabs(x.delta_ns()) > std::fabs(y.delta_ns());
  });

  c.summary.push_back({"step", stepNs(a), stepNs(b)});
  const RankBreakdown* ra = breakdownOf(a_breakdown, rank);
  const RankBreakdown* rb = breakdownOf(b_breakdown, rank);
  if (ra && rb) {
    // Inside the steps where the run recorded them (a real run's set-up lies
    // outside), per step of the rank.
    const traces::Breakdown* ba = ra->steps > 0 ? &ra->in_steps : &ra->breakdown;
    const traces::Breakdown* bb = rb->steps > 0 ? &rb->in_steps : &rb->breakdown;
    const double steps_a = double(std::max(1, ra->steps));
    const double steps_b = double(std::max(1, rb->steps));
    c.summary.push_back({"compute", double(ba->compute_ns) / steps_a, double(bb->compute_ns) / steps_b});
    c.summary.push_back({"exposed comm", double(ba->exposed_comm_ns) / steps_a, double(bb->exposed_comm_ns) / steps_b});
    c.summary.push_back({"hidden comm", double(ba->overlap_ns) / steps_a, double(bb->overlap_ns) / steps_b});
    c.summary.push_back({"recompute", double(ba->recompute_ns) / steps_a, double(bb->recompute_ns) / steps_b});
    c.summary.push_back({"idle", double(ba->idle_ns) / steps_a, double(bb->idle_ns) / steps_b});
  }

  // The verdict names the step change and its largest contributors.
  const double step_delta = c.summary[0].b_ns - c.summary[0].a_ns;
  std::string v = "B's step is " + signedMs(step_delta) + " versus A";
  std::vector<std::pair<double, std::string>> parts;
  for (size_t i = 1; i < c.summary.size(); ++i) {
    const auto& r = c.summary[i];
    if (r.metric == "hidden comm" || r.metric == "idle") continue;
    const double d = r.b_ns - r.a_ns;
    if (std::fabs(d) >= 1e3) parts.push_back({d, r.metric + " " + signedMs(d)});
  }
  std::sort(parts.begin(), parts.end(),
            [](const auto& x, const auto& y) { return std::fabs(x.first) > std::fabs(y.first); });
  if (!parts.empty()) {
    v += ": ";
    for (size_t i = 0; i < parts.size(); ++i) v += (i ? ", " : "") + parts[i].second;
  }
  c.verdict = v + ".";
  return c;
}

}  // namespace tandem::gui
