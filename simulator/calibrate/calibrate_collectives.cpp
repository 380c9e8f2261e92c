#include "simulator/calibrate/calibrate_collectives.h"

#include <algorithm>
#include <stdexcept>

#include "simulator/cost/cost_model.h"

namespace tandem::sim {

RunKernelsAndCollectives readKernelsAndCollectives(traces::TraceReader& reader, int64_t run, const Plan& plan) {
  RunKernelsAndCollectives out;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.kind != traces::ActivityKind::Kernel || a.task_id < 0) return;
    try {
      const RankPlan& p = plan.forRank(a.rank);
      if (a.task_id < int64_t(p.tasks.size()) && !p.tasks[size_t(a.task_id)].collective)
        out.kernels[a.rank].push_back({a.start_ns, a.end_ns, a.task_id});
    } catch (const std::out_of_range&) {
    }
  });
  for (auto& [rank, v] : out.kernels)
    std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
  out.collectives = reader.collectives(run);
  return out;
}

std::vector<int64_t> transferStarts(const std::vector<traces::CollectiveRow>& rows) {
  std::vector<int64_t> out(rows.size());
  std::map<std::pair<int64_t, std::string>, std::vector<size_t>> same;  // (task, group) -> rows by start
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i] = rows[i].start_ns;
    same[{rows[i].task_id, rows[i].group}].push_back(i);
  }
  for (auto& [key, idx] : same) {
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return rows[a].start_ns < rows[b].start_ns; });
    // The instances of one task follow each other (a step apart): a row's
    // peers are the other ranks' rows that overlap it.
    for (size_t k = 0; k < idx.size(); ++k) {
      const traces::CollectiveRow& c = rows[idx[k]];
      for (size_t j = k + 1; j < idx.size() && rows[idx[j]].start_ns < c.end_ns; ++j) {
        const traces::CollectiveRow& o = rows[idx[j]];
        if (o.rank == c.rank) continue;
        out[idx[k]] = std::max(out[idx[k]], std::min(o.start_ns, c.end_ns));
      }
    }
  }
  return out;
}

// For each (rank, collective task): the task role (taskRole) of the compute
// kernels beside the collective the longest on that rank, the most frequent
// over its steps; "" when none ran. The simulator picks the role the same
// way (Replay::dominantRoleBeside).
std::map<traces::TaskKey, std::string> rolesBesideCollectives(const RunKernelsAndCollectives& run,
                                                              const Plan& plan) {
  using Kernel = RunKernelsAndCollectives::Kernel;
  std::map<traces::TaskKey, std::map<std::string, int>> counts;
  const std::vector<int64_t> transfer = transferStarts(run.collectives);
  for (size_t ci = 0; ci < run.collectives.size(); ++ci) {
    const traces::CollectiveRow& c = run.collectives[ci];
    const int64_t start = transfer[ci];
    std::map<std::string, int64_t> overlap;
    const auto it = run.kernels.find(c.rank);
    if (it != run.kernels.end()) {
      // Kernels that start before the collective ends, back to those that
      // ended before it started (none runs for 100 ms).
      const auto& v = it->second;
      auto pos = std::upper_bound(v.begin(), v.end(), c.end_ns, [](int64_t t, const Kernel& k) { return t < k.start; });
      while (pos != v.begin()) {
        --pos;
        if (pos->start < start - 100'000'000) break;
        const int64_t a = std::max(pos->start, start), b = std::min(pos->end, c.end_ns);
        if (b > a) overlap[taskRole(plan.forRank(c.rank).tasks[size_t(pos->task)].name)] += b - a;
      }
    }
    std::string role;
    int64_t most = 0;
    for (const auto& [r, ns] : overlap)
      if (ns > most) most = ns, role = r;
    ++counts[{c.rank, c.task_id}][role];
  }
  std::map<traces::TaskKey, std::string> out;
  for (const auto& [key, by_role] : counts) {
    int best = -1;
    for (const auto& [role, n] : by_role)
      if (n > best) best = n, out[key] = role;
  }
  return out;
}

// For each collective of a multi-rank run: how long after its inputs were
// ready its NCCL kernel started, as a share of the remaining time of the
// compute kernel that was running at that moment (on H200 NCCL's kernel gets
// the SMs as the running kernel's blocks retire). Collectives that became
// ready on an idle GPU say nothing and are left out.
std::vector<double> collectiveStartWaits(const RunKernelsAndCollectives& run, const Plan& plan) {
  using Kernel = RunKernelsAndCollectives::Kernel;
  std::map<traces::TaskKey, std::vector<Kernel>> by_task;  // kernels of compute tasks
  for (const auto& [rank, v] : run.kernels)
    for (const Kernel& k : v) by_task[{rank, k.task}].push_back(k);
  std::vector<double> shares;
  for (const auto& c : run.collectives) {
    const RankPlan* p = nullptr;
    try {
      p = &plan.forRank(c.rank);
    } catch (const std::out_of_range&) {
      continue;
    }
    if (c.task_id < 0 || c.task_id >= int64_t(p->tasks.size())) continue;
    const Task& task = p->tasks[size_t(c.task_id)];
    // Ready: the last end, before the collective started, of the compute
    // tasks whose events it waits for.
    int64_t ready = -1;
    for (const Task& producer : p->tasks) {
      if (producer.record_event < 0 || producer.collective ||
          std::find(task.wait_events.begin(), task.wait_events.end(), producer.record_event) == task.wait_events.end())
        continue;
      const auto it = by_task.find({c.rank, producer.id});
      if (it == by_task.end()) continue;
      for (const Kernel& k : it->second)
        if (k.end <= c.start_ns) ready = std::max(ready, k.end);
    }
    if (ready < 0 || c.start_ns - ready > 10'000'000) continue;
    // The kernels holding the GPU then: running at `ready`, or launched
    // right after it (the next task of the compute stream starts within
    // microseconds of the one the collective waited for).
    constexpr int64_t kNextKernelNs = 5000;
    int64_t running_end = ready;
    const auto kit = run.kernels.find(c.rank);
    if (kit == run.kernels.end()) continue;
    const auto& v = kit->second;
    auto pos = std::upper_bound(v.begin(), v.end(), ready + kNextKernelNs,
                                [](int64_t t, const Kernel& k) { return t < k.start; });
    for (int back = 0; back < 8 && pos != v.begin(); ++back) {
      --pos;
      if (pos->end > ready) running_end = std::max(running_end, pos->end);
    }
    const int64_t remaining = running_end - ready;
    if (remaining < 2000) continue;
    shares.push_back(std::clamp(double(c.start_ns - ready) / double(remaining), 0.0, 1.5));
  }
  return shares;
}

BesideFit fitCollectiveBeside(const std::map<std::string, RoleRatio>& ratios) {
  BesideFit fit;
  if (ratios.empty()) return fit;
  std::map<std::string, double> factor;
  for (const auto& [role, r] : ratios) factor[role] = r.median;
  factor[kUnseenKernelBeside] = 1.0;
  double lowest = 1.0;
  for (const auto& [role, f] : factor) lowest = std::min(lowest, f);
  fit.model_scale = std::max(lowest, 0.2);
  for (const auto& [role, f] : factor) {
    const double scaled = std::clamp(f / fit.model_scale, 0.2, 5.0);
    if (role == kUnseenKernelBeside && scaled == 1.0) continue;
    const auto n = ratios.find(role);
    fit.reports.push_back({role, scaled, n == ratios.end() ? 0 : n->second.samples});
  }
  return fit;
}

}  // namespace tandem::sim
