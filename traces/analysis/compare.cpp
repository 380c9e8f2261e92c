#include "traces/analysis/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "traces/analysis/analysis.h"
#include "traces/analysis/interval_set.h"

namespace tandem::traces {
namespace {

// Work that occupies SMs: kernels, memsets and NCCL's collectives and
// point-to-point transfers (kernels too); copies run on copy engines.
bool usesSms(ActivityKind k) {
  return k == ActivityKind::Kernel || k == ActivityKind::Memset || k == ActivityKind::Collective ||
         k == ActivityKind::Send || k == ActivityKind::Recv;
}

// A track's SM work, as intervals (any order, overlaps allowed).
void addSmWork(const Track& t, std::vector<IntervalSet::Interval>& out) {
  for (size_t i = 0; i < t.size(); ++i)
    if (usesSms(t.kind[i]) && t.end_ns[i] > t.start_ns[i]) out.emplace_back(t.start_ns[i], t.end_ns[i]);
}

}  // namespace

std::map<TaskKey, TaskTime> taskTimesPerStep(TraceReader& reader, int64_t run) {
  // Step starts per rank, sorted, to place each activity in its step, and
  // where the rank's last step ends.
  std::map<int, std::vector<int64_t>> step_starts;
  std::map<int, int64_t> steps_end;
  for (const StepRow& s : reader.steps(run)) {
    step_starts[s.rank].push_back(s.start_ns);
    int64_t& end = steps_end.try_emplace(s.rank, s.end_ns).first->second;
    end = std::max(end, s.end_ns);
  }
  for (auto& [rank, starts] : step_starts) std::sort(starts.begin(), starts.end());
  std::map<TaskKey, std::pair<std::string, std::string>> plan;  // (op, name)
  for (const PlanTaskRow& t : reader.planTasks(run)) plan[{t.rank, t.task_id}] = {t.op, t.name};

  // Per task: the summed duration within each step; the median over steps is
  // the task's time (warm-up steps and rare stalls do not move it). Tasks
  // get dense indices and their (step, ns) sums go into one flat array, not
  // a map per task: a 10M-activity run has millions of tasks.
  struct Sum {
    uint32_t task;
    uint32_t step;
    double ns;
  };
  struct TaskAcc {
    TaskKey key;
    int32_t first_name = -1;  // string id of its first activity
    int64_t activities = 0;
    size_t open = SIZE_MAX;   // its last Sum, while activities of that step keep coming
    double ns = 0, beside_ns = 0;  // over every step counted: time, and time beside other streams' SM work
  };
  std::vector<TaskAcc> tasks;
  std::unordered_map<uint64_t, uint32_t> index_of;  // (rank << 40 | task id) -> index in tasks
  std::vector<Sum> sums;
  const std::vector<Track> tracks = reader.loadRun(run, /*with_details=*/false);
  for (size_t ti = 0; ti < tracks.size(); ++ti) {
    const Track& t = tracks[ti];
    // What the rank's other streams ran on the SMs: the time each of this
    // stream's activities had work beside it.
    std::vector<IntervalSet::Interval> other_work;
    for (size_t oi = 0; oi < tracks.size(); ++oi)
      if (oi != ti && tracks[oi].rank == t.rank) addSmWork(tracks[oi], other_work);
    const IntervalSet beside = IntervalSet::fromUnsorted(std::move(other_work));
    const std::vector<int64_t>* starts = nullptr;
    int64_t last_end = 0;
    if (auto it = step_starts.find(t.rank); it != step_starts.end()) {
      starts = &it->second;
      last_end = steps_end[t.rank];
    }
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.task_id[i] < 0 || t.kind[i] == ActivityKind::Host) continue;
      if (starts != nullptr && (t.start_ns[i] < starts->front() || t.start_ns[i] >= last_end)) continue;
      const uint64_t packed = (uint64_t(uint32_t(t.rank)) << 40) ^ uint64_t(t.task_id[i]);
      auto [it, fresh] = index_of.emplace(packed, uint32_t(tasks.size()));
      if (fresh) tasks.push_back({{t.rank, t.task_id[i]}, t.name[i], 0, SIZE_MAX});
      TaskAcc& a = tasks[it->second];
      a.activities++;
      uint32_t step = 0;
      if (starts != nullptr) {
        const auto pos = std::upper_bound(starts->begin(), starts->end(), t.start_ns[i]);
        step = pos == starts->begin() ? 0 : uint32_t(pos - starts->begin() - 1);
      }
      const double ns = double(t.end_ns[i] - t.start_ns[i]);
      a.ns += ns;
      if (!beside.empty() && usesSms(t.kind[i])) a.beside_ns += double(beside.lengthIn(t.start_ns[i], t.end_ns[i]));
      if (a.open != SIZE_MAX && sums[a.open].step == step) {
        sums[a.open].ns += ns;
      } else {
        a.open = sums.size();
        sums.push_back({it->second, step, ns});
      }
    }
  }
  // Each task's sums together, by step; a step that came back (a task on two
  // streams) is added to its first sum.
  std::sort(sums.begin(), sums.end(),
            [](const Sum& x, const Sum& y) { return x.task != y.task ? x.task < y.task : x.step < y.step; });
  std::map<TaskKey, TaskTime> times;
  std::vector<double> durations;
  for (size_t k = 0; k < sums.size();) {
    const uint32_t task = sums[k].task;
    durations.clear();
    for (; k < sums.size() && sums[k].task == task; ++k) {
      if (!durations.empty() && sums[k - 1].step == sums[k].step)  // same task: durations restart per task
        durations.back() += sums[k].ns;
      else
        durations.push_back(sums[k].ns);
    }
    std::sort(durations.begin(), durations.end());
    const size_t n = durations.size();
    const TaskAcc& a = tasks[task];
    TaskTime& t = times[a.key];
    t.ns = n % 2 ? durations[n / 2] : 0.5 * (durations[n / 2 - 1] + durations[n / 2]);
    // Activities per step, for callers that charge a launch per kernel.
    t.activities = (a.activities + int64_t(n) - 1) / int64_t(std::max<size_t>(n, 1));
    t.name = reader.string(a.first_name);
    // The plan's op and task name where the run has them: a task's first
    // activity can be a cuBLASLt memset, which says nothing of the task.
    const auto p = plan.find(a.key);
    t.op = p != plan.end() && !p->second.first.empty() ? p->second.first : t.name;
    if (p != plan.end() && !p->second.second.empty()) t.name = p->second.second;
    t.planned = p != plan.end();
    t.beside_share = a.ns > 0 ? a.beside_ns / a.ns : 0.0;
  }
  return times;
}

namespace {

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per (rank, step) like the step time and the task times, then the median:
// the first step of a real run (NCCL set-up, graph capture) must not weigh
// on the figures of the steady state. A run without step rows is one step.
RunSide sideOf(TraceReader& reader, int64_t run, int64_t tasks) {
  const RunReport rep = analyzeRun(reader, run);
  RunSide s;
  s.run = rep.run;
  for (const StatRow& st : rep.stats)
    if (st.severity != Severity::Info) s.warnings.push_back(st);
  s.step_ns = double(rep.step_time.duration_ns.p50);
  s.tasks = tasks;
  for (const StreamWaitTotal& w : rep.stream_waits.streams)
    s.stream_waits[w.stream] = {w.stream_name, double(w.p50_step_ns), double(w.p50_step_filled_ns)};
  if (rep.steps.empty()) {
    s.overlap_pct = rep.total.overlap_pct;
    const double rank_steps = std::max<double>(1.0, double(rep.step_time.duration_ns.count));
    s.exposed_comm_ns = double(rep.total.exposed_comm_ns) / rank_steps;
    s.compute_ns = double(rep.total.compute_ns) / rank_steps;
    s.hidden_comm_ns = double(rep.total.overlap_ns) / rank_steps;
    s.recompute_ns = double(rep.total.recompute_ns) / rank_steps;
    s.idle_ns = double(rep.total.idle_ns) / rank_steps;
    return s;
  }
  std::vector<double> overlap, exposed, compute, hidden, recompute, idle;
  for (const StepReport& st : rep.steps) {
    if (st.breakdown.comm_ns > 0) overlap.push_back(st.breakdown.overlap_pct);
    exposed.push_back(double(st.breakdown.exposed_comm_ns));
    compute.push_back(double(st.breakdown.compute_ns));
    hidden.push_back(double(st.breakdown.overlap_ns));
    recompute.push_back(double(st.breakdown.recompute_ns));
    idle.push_back(double(st.breakdown.idle_ns));
  }
  s.overlap_pct = medianOf(overlap);
  s.exposed_comm_ns = medianOf(exposed);
  s.compute_ns = medianOf(compute);
  s.hidden_comm_ns = medianOf(hidden);
  s.recompute_ns = medianOf(recompute);
  s.idle_ns = medianOf(idle);
  return s;
}

// B's step change and its largest contributors, in one sentence.
std::string verdictOf(const RunSide& a, const RunSide& b) {
  std::string v = fmt::format("B's step is {:+.2f} ms versus A", (b.step_ns - a.step_ns) / 1e6);
  std::vector<std::pair<double, std::string>> parts;
  for (const auto& [name, da] : {std::pair{"compute", b.compute_ns - a.compute_ns},
                                 std::pair{"exposed comm", b.exposed_comm_ns - a.exposed_comm_ns},
                                 std::pair{"recompute", b.recompute_ns - a.recompute_ns}})
    if (std::fabs(da) >= 1e3) parts.push_back({da, fmt::format("{} {:+.2f} ms", name, da / 1e6)});
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& x, const auto& y) { return std::fabs(x.first) > std::fabs(y.first); });
  for (size_t i = 0; i < parts.size(); ++i) v += (i ? ", " : ": ") + parts[i].second;
  return v + ".";
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const double rank = std::ceil(q * double(v.size()));
  return v[std::min(v.size() - 1, size_t(std::max(1.0, rank)) - 1)];
}

}  // namespace

RunComparison compareRuns(TraceReader& a, int64_t a_run, TraceReader& b, int64_t b_run, size_t top_n) {
  const auto ta = taskTimesPerStep(a, a_run);
  const auto tb = taskTimesPerStep(b, b_run);
  if (ta.empty())
    throw TraceError(fmt::format("{}: run {} has no activities with plan task ids to compare", a.path(), a_run));
  if (tb.empty())
    throw TraceError(fmt::format("{}: run {} has no activities with plan task ids to compare", b.path(), b_run));
  RunComparison c;
  c.a = sideOf(a, a_run, int64_t(ta.size()));
  c.b = sideOf(b, b_run, int64_t(tb.size()));
  c.step_error_pct = c.a.step_ns > 0 ? 100.0 * (c.b.step_ns - c.a.step_ns) / c.a.step_ns : 0.0;
  c.verdict = verdictOf(c.a, c.b);
  std::map<int, StreamWaitDelta> waits;
  for (const auto& [stream, w] : c.a.stream_waits) {
    StreamWaitDelta& d = waits[stream];
    d.stream = stream;
    d.name = w.name;
    d.a_ns = w.total_ns;
    d.a_filled_ns = w.filled_ns;
  }
  for (const auto& [stream, w] : c.b.stream_waits) {
    StreamWaitDelta& d = waits[stream];
    d.stream = stream;
    if (d.name.empty()) d.name = w.name;
    d.b_ns = w.total_ns;
    d.b_filled_ns = w.filled_ns;
  }
  for (auto& [stream, d] : waits) c.stream_waits.push_back(std::move(d));

  // One plan or two: an id that names another task in B (both runs with
  // plan rows for it) means the ids do not line up, and names join the runs
  // instead.
  bool same_plan = true;
  for (const auto& [key, t] : ta)
    if (const auto it = tb.find(key); it != tb.end() && t.planned && it->second.planned &&
                                      (t.name != it->second.name || t.op != it->second.op)) {
      same_plan = false;
      break;
    }
  using NameKey = std::pair<int, std::string>;
  std::map<NameKey, TaskKey> b_by_name;  // (rank, name) -> B's key
  if (!same_plan) {
    c.matched_by = "plan task name";
    for (const auto& [key, t] : tb) b_by_name.emplace(NameKey{key.first, t.name}, key);
  }
  auto counterpart = [&](const TaskKey& key, const TaskTime& t) {
    if (same_plan) return tb.find(key);
    const auto it = b_by_name.find({key.first, t.name});
    return it == b_by_name.end() ? tb.end() : tb.find(it->second);
  };
  std::set<TaskKey> b_matched;

  std::vector<TaskDelta> deltas;
  std::map<std::string, std::vector<double>> errors_by_op, alone_errors, beside_errors;
  std::map<std::string, OpError> ops;
  for (const auto& [key, t] : ta) {
    const auto it = counterpart(key, t);
    if (it == tb.end()) {
      ++c.only_a;
      c.only_a_no_time += t.ns == 0;
      continue;
    }
    b_matched.insert(it->first);
    // B's id: the task as numbered in the run the comparison predicts.
    TaskDelta d{key.first, it->first.second, t.name, t.op, t.ns, it->second.ns, t.beside_share,
                it->second.beside_share};
    OpError& e = ops[t.op];
    e.op = t.op;
    e.tasks++;
    e.a_total_ns += d.a_ns;
    e.b_total_ns += d.b_ns;
    errors_by_op[t.op].push_back(std::fabs(d.errorPct()));
    // Alone in both runs: the cost model's error alone, no kernel sharing in it.
    const bool alone = t.beside_share < kBesideShare && it->second.beside_share < kBesideShare;
    (alone ? alone_errors : beside_errors)[t.op].push_back(std::fabs(d.errorPct()));
    deltas.push_back(std::move(d));
  }
  c.only_b = int64_t(tb.size() - b_matched.size());
  for (const auto& [key, t] : tb)
    if (t.ns == 0 && !b_matched.count(key)) ++c.only_b_no_time;
  c.matched = int64_t(deltas.size());
  for (auto& [op, e] : ops) {
    const auto& errs = errors_by_op[op];
    e.median_abs_pct = percentile(errs, 0.5);
    e.p90_abs_pct = percentile(errs, 0.9);
    e.max_abs_pct = *std::max_element(errs.begin(), errs.end());
    const auto& alone = alone_errors[op];
    const auto& beside = beside_errors[op];
    e.alone_tasks = int64_t(alone.size());
    e.beside_tasks = int64_t(beside.size());
    e.alone_median_abs_pct = alone.empty() ? 0.0 : percentile(alone, 0.5);
    e.beside_median_abs_pct = beside.empty() ? 0.0 : percentile(beside, 0.5);
    c.by_op.push_back(e);
  }
  std::sort(deltas.begin(), deltas.end(), [](const TaskDelta& x, const TaskDelta& y) {
    const double dx = std::fabs(x.b_ns - x.a_ns), dy = std::fabs(y.b_ns - y.a_ns);
    if (dx != dy) return dx > dy;
    return std::tie(x.rank, x.task_id) < std::tie(y.rank, y.task_id);
  });
  if (deltas.size() > top_n) deltas.resize(top_n);
  c.top_tasks = std::move(deltas);
  return c;
}

std::string comparisonToText(const RunComparison& c) {
  std::string s;
  auto ms = [](double ns) { return ns / 1e6; };
  s += fmt::format("A: run {} ({}, \"{}\")\nB: run {} ({}, \"{}\")\n", c.a.run.id, toString(c.a.run.kind), c.a.run.name,
                   c.b.run.id, toString(c.b.run.kind), c.b.run.name);
  // Tasks of one run only that take no time there (fused into another
  // task's kernel) are said apart: they are no missing work.
  auto only = [](int64_t n, int64_t no_time) {
    return no_time == 0 ? fmt::format("{}", n) : fmt::format("{}, {} of them taking no time", n, no_time);
  };
  s += fmt::format("tasks matched by (rank, {}): {} (only in A: {}, only in B: {}){}\n", c.matched_by, c.matched,
                   only(c.only_a, c.only_a_no_time), only(c.only_b, c.only_b_no_time),
                   c.matched_by == "plan task id" ? "" : "; the runs' plans number their tasks differently");
  for (const auto& [label, side] : {std::pair{"A", &c.a}, std::pair{"B", &c.b}})
    for (const StatRow& st : side->warnings)
      s += fmt::format("{} warns ({} {}): {}\n", label, st.name, st.value, st.description);
  s += "\n";
  s += fmt::format("{:<24} {:>12} {:>12} {:>10}\n", "per rank and step", "A", "B", "B - A");
  s += fmt::format("{:<24} {:>12.3f} {:>12.3f} {:>+9.2f}%\n", "step time (ms, p50)", ms(c.a.step_ns), ms(c.b.step_ns),
                   c.step_error_pct);
  s += fmt::format("{:<24} {:>12.3f} {:>12.3f} {:>+10.3f}\n", "compute (ms)", ms(c.a.compute_ns), ms(c.b.compute_ns),
                   ms(c.b.compute_ns - c.a.compute_ns));
  s += fmt::format("{:<24} {:>12.3f} {:>12.3f} {:>+10.3f}\n", "exposed comm (ms)", ms(c.a.exposed_comm_ns),
                   ms(c.b.exposed_comm_ns), ms(c.b.exposed_comm_ns - c.a.exposed_comm_ns));
  s += fmt::format("{:<24} {:>12.1f} {:>12.1f} {:>+9.1f}pp\n", "comm/compute overlap %", c.a.overlap_pct,
                   c.b.overlap_pct, c.b.overlap_pct - c.a.overlap_pct);
  for (const auto& [label, a_ns, b_ns] : {std::tuple{"hidden comm (ms)", c.a.hidden_comm_ns, c.b.hidden_comm_ns},
                                         std::tuple{"recompute (ms)", c.a.recompute_ns, c.b.recompute_ns},
                                         std::tuple{"idle (ms)", c.a.idle_ns, c.b.idle_ns}})
    s += fmt::format("{:<24} {:>12.3f} {:>12.3f} {:>+10.3f}\n", label, ms(a_ns), ms(b_ns), ms(b_ns - a_ns));
  s += c.verdict + "\n\n";
  if (!c.stream_waits.empty()) {
    s += "stream waits per rank and step, median (us; filled: while other streams ran GPU work)\n";
    s += fmt::format("{:<24} {:>12} {:>12} {:>10} {:>9} {:>9}\n", "stream", "A", "B", "B - A", "A filled", "B filled");
    auto pct = [](double part, double whole) { return whole > 0 ? fmt::format("{:.1f}%", 100.0 * part / whole) : "-"; };
    for (const StreamWaitDelta& d : c.stream_waits)
      s += fmt::format("{:<24} {:>12.1f} {:>12.1f} {:>+10.1f} {:>9} {:>9}\n",
                       fmt::format("s{} {}", d.stream, d.name), d.a_ns / 1e3, d.b_ns / 1e3, (d.b_ns - d.a_ns) / 1e3,
                       pct(d.a_filled_ns, d.a_ns), pct(d.b_filled_ns, d.b_ns));
    s += "\n";
  }
  s += "task time error by op (|B - A| / A, per task; alone: median and count of the tasks that had another\n"
       "stream's GPU work beside them for less than 10% of their time in both runs, beside: of the others)\n";
  s += fmt::format("{:<20} {:>6} {:>11} {:>11} {:>9} {:>9} {:>9} {:>14} {:>14}\n", "op", "tasks", "A ms", "B ms",
                   "median%", "p90%", "max%", "alone", "beside");
  auto split = [](int64_t n, double median) { return n == 0 ? std::string("-") : fmt::format("{:.1f}% ({})", median, n); };
  for (const OpError& e : c.by_op)
    s += fmt::format("{:<20} {:>6} {:>11.3f} {:>11.3f} {:>9.1f} {:>9.1f} {:>9.1f} {:>14} {:>14}\n", e.op, e.tasks,
                     ms(e.a_total_ns), ms(e.b_total_ns), e.median_abs_pct, e.p90_abs_pct, e.max_abs_pct,
                     split(e.alone_tasks, e.alone_median_abs_pct), split(e.beside_tasks, e.beside_median_abs_pct));
  s += "\ntasks with the largest absolute difference\n";
  s += fmt::format("{:>5} {:>6} {:<40} {:>10} {:>10} {:>8} {:>9}\n", "rank", "task", "name", "A us", "B us",
                   "error%", "beside%");
  // beside%: of the task's time, beside another stream's GPU work, A / B.
  for (const TaskDelta& d : c.top_tasks)
    s += fmt::format("{:>5} {:>6} {:<40} {:>10.1f} {:>10.1f} {:>+8.1f} {:>4.0f}/{:<4.0f}\n", d.rank, d.task_id, d.name,
                     d.a_ns / 1e3, d.b_ns / 1e3, d.errorPct(), 100 * d.a_beside, 100 * d.b_beside);
  return s;
}

std::string comparisonToJson(const RunComparison& c) {
  using nlohmann::json;
  auto warningsJson = [](const std::vector<StatRow>& rows) {
    json list = json::array();
    for (const StatRow& st : rows)
      list.push_back({{"name", st.name}, {"value", st.value}, {"severity", std::string(toString(st.severity))},
                      {"description", st.description}});
    return list;
  };
  auto side = [&](const RunSide& s) {
    return json{{"run", s.run.id},        {"kind", toString(s.run.kind)}, {"name", s.run.name},
                {"step_ns", s.step_ns},   {"overlap_pct", s.overlap_pct}, {"exposed_comm_ns", s.exposed_comm_ns},
                {"compute_ns", s.compute_ns}, {"hidden_comm_ns", s.hidden_comm_ns}, {"recompute_ns", s.recompute_ns},
                {"idle_ns", s.idle_ns}, {"tasks", s.tasks}, {"warnings", warningsJson(s.warnings)}};
  };
  json j;
  j["a"] = side(c.a);
  j["b"] = side(c.b);
  j["step_error_pct"] = c.step_error_pct;
  j["overlap_diff_pp"] = c.b.overlap_pct - c.a.overlap_pct;
  j["exposed_comm_diff_ns"] = c.b.exposed_comm_ns - c.a.exposed_comm_ns;
  j["verdict"] = c.verdict;
  j["matched"] = c.matched;
  j["matched_by"] = c.matched_by;
  j["only_a"] = c.only_a;
  j["only_b"] = c.only_b;
  j["only_a_no_time"] = c.only_a_no_time;
  j["only_b_no_time"] = c.only_b_no_time;
  json ops = json::array();
  for (const OpError& e : c.by_op)
    ops.push_back({{"op", e.op},
                   {"tasks", e.tasks},
                   {"a_ns", e.a_total_ns},
                   {"b_ns", e.b_total_ns},
                   {"median_abs_pct", e.median_abs_pct},
                   {"p90_abs_pct", e.p90_abs_pct},
                   {"max_abs_pct", e.max_abs_pct},
                   {"alone_tasks", e.alone_tasks},
                   {"alone_median_abs_pct", e.alone_median_abs_pct},
                   {"beside_tasks", e.beside_tasks},
                   {"beside_median_abs_pct", e.beside_median_abs_pct}});
  j["by_op"] = ops;
  json waits = json::array();
  for (const StreamWaitDelta& d : c.stream_waits)
    waits.push_back({{"stream", d.stream}, {"name", d.name}, {"a_ns", d.a_ns}, {"b_ns", d.b_ns},
                     {"a_filled_ns", d.a_filled_ns}, {"b_filled_ns", d.b_filled_ns}});
  j["stream_waits"] = waits;
  json top = json::array();
  for (const TaskDelta& d : c.top_tasks)
    top.push_back({{"rank", d.rank}, {"task_id", d.task_id}, {"name", d.name}, {"op", d.op}, {"a_ns", d.a_ns},
                   {"b_ns", d.b_ns}, {"error_pct", d.errorPct()}, {"a_beside_share", d.a_beside},
                   {"b_beside_share", d.b_beside}});
  j["top_tasks"] = top;
  return j.dump(2);
}

}  // namespace tandem::traces
