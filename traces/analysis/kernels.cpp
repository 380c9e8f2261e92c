// Kernel statistics by op and by name, and attribution to plan tasks.
#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "traces/analysis/kernel_names.h"
#include "traces/analysis/parts.h"

namespace tandem::traces::detail {

namespace {

struct Group {
  Category category = Category::Compute;
  std::vector<int64_t> durations;
  double flops = 0;
  int64_t flops_time_ns = 0;
  int64_t bytes = 0;
  int64_t bytes_time_ns = 0;
  // Kernels that carry no figures of their own (a profiled run's): their
  // plan task's flops and bytes, once per execution, over their time.
  double plan_flops = 0;
  int64_t plan_bytes = 0;
  int64_t plan_time_ns = 0;
};

void add(Group& g, Category c, int64_t dur, double flops, int64_t bytes) {
  if (g.durations.empty()) g.category = c;
  g.durations.push_back(dur);
  if (flops > 0) {
    g.flops += flops;
    g.flops_time_ns += dur;
  }
  if (bytes > 0) {
    g.bytes += bytes;
    g.bytes_time_ns += dur;
  }
}

KernelStat statOf(const std::string& key, Group& g) {
  KernelStat s;
  s.key = key;
  s.category = std::string(toString(g.category));
  for (int64_t x : g.durations) s.total_ns += x;
  Distribution d = distributionOf(std::move(g.durations));
  s.count = d.count;
  s.mean_ns = d.mean;
  s.p50_ns = d.p50;
  s.p95_ns = d.p95;
  // flops per ns is GFLOP/s; bytes per ns is GB/s.
  const double flops = g.flops + g.plan_flops;
  const int64_t flops_ns = g.flops_time_ns + (g.plan_flops > 0 ? g.plan_time_ns : 0);
  const int64_t bytes = g.bytes + g.plan_bytes;
  const int64_t bytes_ns = g.bytes_time_ns + (g.plan_bytes > 0 ? g.plan_time_ns : 0);
  s.flops = flops;
  s.bytes = bytes;
  if (flops_ns > 0) s.tflops = flops / static_cast<double>(flops_ns) / 1e3;
  if (bytes_ns > 0) s.gbps = static_cast<double>(bytes) / static_cast<double>(bytes_ns);
  return s;
}

// Which recorded step of its rank a time falls in (-1: none).
class StepFinder {
 public:
  explicit StepFinder(const std::vector<StepRow>& steps) {
    for (const StepRow& st : steps) by_rank_[st.rank].push_back(st);
    for (auto& [rank, v] : by_rank_)
      std::sort(v.begin(), v.end(), [](const StepRow& a, const StepRow& b) { return a.start_ns < b.start_ns; });
  }
  int stepAt(int rank, int64_t t) const {
    const auto it = by_rank_.find(rank);
    if (it == by_rank_.end()) return -1;
    const auto& v = it->second;
    auto after = std::upper_bound(v.begin(), v.end(), t, [](int64_t x, const StepRow& st) { return x < st.start_ns; });
    if (after == v.begin()) return -1;
    const StepRow& st = *std::prev(after);
    return t < st.end_ns ? st.step : -1;
  }

 private:
  std::map<int, std::vector<StepRow>> by_rank_;
};

void sortByTotal(std::vector<KernelStat>& v) {
  std::sort(v.begin(), v.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.key < b.key;
  });
}

}  // namespace

void kernelStatistics(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                      const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                      const std::vector<StreamRow>& streams, const std::vector<StepRow>& steps,
                      const AnalysisOptions& options, RunReport& report) {
  std::set<std::pair<int, int>> setup_streams;  // (rank, stream)
  for (const StreamRow& s : streams)
    if (s.name == kSetupStreamName) setup_streams.insert({s.rank, s.stream});
  std::unordered_map<int64_t, const PlanTaskRow*> task_of;  // (rank << 40 | task) -> its plan row
  for (const auto& t : plan) task_of.emplace((int64_t(t.rank) << 40) | t.task_id, &t);
  // A profiled run's kernels carry no flops or bytes: an op's rates come from
  // its plan tasks' figures, counted once per task and recorded step (the
  // executions: a task's kernels in one step are one), over the time of
  // every kernel of those executions. Without recorded steps there is no
  // telling executions apart, and no rate.
  const StepFinder step_of(steps);
  std::set<std::tuple<int, int64_t, int>> executed;  // (rank, task, step)
  // Only a run whose kernels carry no figures at all (a profiled one: its
  // copies do carry bytes) takes its plan's: in a simulated run a task's
  // trailing kernels (a weight gradient's bias sums) carry none while its
  // main kernel carries the task's, which would be counted twice.
  bool kernels_carry_figures = false;
  for (const auto& rank : ranks)
    for (const Track* t : rank.tracks)
      for (size_t i = 0; i < t->size() && !kernels_carry_figures; ++i)
        kernels_carry_figures = t->kind[i] == ActivityKind::Kernel && (t->flops[i] > 0 || t->bytes[i] > 0);
  std::map<std::string, Group> by_op;
  std::map<std::string, Group> host_calls;  // synchronization records: the host waiting, not GPU work
  std::vector<Group> by_name(strings.size());
  std::vector<int64_t> unattributed_ns(strings.size(), 0);
  std::vector<char> unattributed_seen(strings.size(), 0);
  Attribution& attr = report.attribution;
  for (const auto& rank : ranks) {
    for (const Track* t : rank.tracks) {
      const bool setup = setup_streams.count({rank.rank, t->stream}) > 0;
      for (size_t i = 0; i < t->size(); ++i) {
        Category c = categories.of(t->kind[i], t->name[i]);
        if (c == Category::Host) continue;
        int64_t dur = t->end_ns[i] - t->start_ns[i];
        if (t->kind[i] == ActivityKind::Sync) {
          // cudaEventSynchronize, cudaStreamWaitEvent and their kin: a table
          // of their own, outside the GPU work's tables and the attribution.
          add(host_calls[compactName(strings[static_cast<size_t>(t->name[i])])], c, dur, 0, 0);
          continue;
        }
        std::string_view op = toString(t->kind[i]);
        // Set-up work is not the plan's: a row of its own, outside the
        // attribution's counts (the profiler counts it in
        // profiler.setup_records, never as unattributed kernels).
        if (setup && t->task_id[i] < 0) {
          // Its kernels; its copies and memsets stay under their kinds.
          add(by_op[t->kind[i] == ActivityKind::Kernel ? std::string("set-up") : std::string(op)], c, dur,
              t->flops[i], t->bytes[i]);
          add(by_name[static_cast<size_t>(t->name[i])], c, dur, t->flops[i], t->bytes[i]);
          continue;
        }
        ++attr.gpu_activities;
        const bool compute_kernel = t->kind[i] == ActivityKind::Kernel && c == Category::Compute;
        attr.compute_kernels += compute_kernel;
        if (t->task_id[i] >= 0) {
          ++attr.attributed;
          attr.compute_attributed += compute_kernel;
          auto it = task_of.find((int64_t(rank.rank) << 40) | t->task_id[i]);
          // Copies and memsets a task issues (cuBLASLt workspace clears, say)
          // stay under their own kind, so an op's row holds one category.
          const bool work = t->kind[i] == ActivityKind::Kernel || t->kind[i] == ActivityKind::Collective;
          if (work && it != task_of.end() && !it->second->op.empty()) {
            op = it->second->op;
            const PlanTaskRow& task = *it->second;
            const int step = step_of.stepAt(rank.rank, t->start_ns[i]);
            if (!kernels_carry_figures && t->kind[i] == ActivityKind::Kernel && step >= 0 &&
                (task.flops > 0 || task.bytes > 0)) {
              Group& g = by_op[std::string(op)];
              g.plan_time_ns += dur;
              if (executed.insert({rank.rank, task.task_id, step}).second) {
                g.plan_flops += task.flops;
                g.plan_bytes += task.bytes;
              }
            }
          }
        } else {
          unattributed_ns[static_cast<size_t>(t->name[i])] += dur;
          unattributed_seen[static_cast<size_t>(t->name[i])] = 1;
        }
        add(by_op[std::string(op)], c, dur, t->flops[i], t->bytes[i]);
        add(by_name[static_cast<size_t>(t->name[i])], c, dur, t->flops[i], t->bytes[i]);
      }
    }
  }
  for (auto& [key, g] : by_op) report.by_op.push_back(statOf(key, g));
  sortByTotal(report.by_op);
  // Rank names by total time before computing percentiles for the top ones only.
  std::vector<std::pair<int64_t, size_t>> totals;
  for (size_t n = 0; n < by_name.size(); ++n) {
    if (by_name[n].durations.empty()) continue;
    int64_t total = 0;
    for (int64_t d : by_name[n].durations) total += d;
    totals.emplace_back(total, n);
  }
  std::sort(totals.begin(), totals.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : strings[a.second] < strings[b.second];
  });
  for (size_t k = 0; k < totals.size() && k < options.top_names; ++k) {
    const std::string& symbol = strings[totals[k].second];
    report.by_name.push_back(statOf(compactName(symbol), by_name[totals[k].second]));
    report.by_name.back().symbol = symbol;
  }
  sortByTotal(report.by_name);
  for (auto& [key, g] : host_calls) report.host_calls.push_back(statOf(key, g));
  sortByTotal(report.host_calls);

  attr.share_pct = attr.gpu_activities > 0
                       ? 100.0 * static_cast<double>(attr.attributed) / static_cast<double>(attr.gpu_activities)
                       : 0.0;
  std::vector<std::pair<std::string, int64_t>> un;
  for (size_t n = 0; n < unattributed_seen.size(); ++n)
    if (unattributed_seen[n]) un.emplace_back(strings[n], unattributed_ns[n]);
  attr.unattributed_names = static_cast<int64_t>(un.size());
  std::sort(un.begin(), un.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (un.size() > options.top_names) un.resize(options.top_names);
  attr.top_unattributed = std::move(un);
}

}  // namespace tandem::traces::detail
