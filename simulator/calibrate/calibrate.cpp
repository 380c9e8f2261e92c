#include "simulator/calibrate/calibrate.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "engine/ir/kernel_revisions.h"
#include "plan_trace/plan_facts.h"
#include "simulator/calibrate/calibrate_collectives.h"
#include "simulator/calibrate/main_kernel.h"
#include "simulator/cost/gemm_tiles.h"
#include "simulator/cost/shape_interpolation.h"
#include "traces/analysis/compare.h"

namespace tandem::sim {
namespace {

// Terms of the per-op fit: base, GFLOP, MB, MB on a slow kernel path.
constexpr int kFitTerms = 4;

// Collective sizes closer than this factor share one bandwidth point.
constexpr double kSizePoolRatio = 1.25;


struct Sample {
  double gflop = 0, mb = 0, ns = 0;
  std::string shape;
  double mb_slow = 0;     // the MB on a kernel's slow path (slowPathMb)
  double under_comm = 0;  // share of the task's kernel time under a resident collective
  double launch_ns = 0;   // the part of ns that is the task's launch gaps
  bool multi_rank = false;  // measured in a run of more than one rank
  bool shared = false;      // measured only beside kernels of another compute stream
  bool sweep = false;       // from a run of the kernel sweep (CalibrationInput::sweep)
};

struct CollSample {
  double bus_bytes = 0, ns = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Solves the (up to 3x3) normal equations of a weighted least-squares fit of
// ns over the chosen columns; weights 1/ns^2 make it minimise relative error.
bool solveWeighted(const std::vector<Sample>& s, const std::array<bool, kFitTerms>& use,
                   std::array<double, kFitTerms>& coef) {
  std::vector<int> cols;
  for (int c = 0; c < kFitTerms; ++c)
    if (use[c]) cols.push_back(c);
  const size_t k = cols.size();
  double A[kFitTerms][kFitTerms + 1] = {};
  for (const Sample& x : s) {
    const double w = 1.0 / std::max(x.ns * x.ns, 1.0);
    const double f[kFitTerms] = {1.0, x.gflop, x.mb, x.mb_slow};
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; j < k; ++j) A[i][j] += w * f[cols[i]] * f[cols[j]];
      A[i][kFitTerms] += w * f[cols[i]] * x.ns;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (size_t i = 0; i < k; ++i) {
    size_t p = i;
    for (size_t r = i + 1; r < k; ++r)
      if (std::fabs(A[r][i]) > std::fabs(A[p][i])) p = r;
    if (std::fabs(A[p][i]) < 1e-300) return false;
    std::swap(A[i], A[p]);
    for (size_t r = 0; r < k; ++r) {
      if (r == i) continue;
      const double f = A[r][i] / A[i][i];
      for (size_t c = i; c <= kFitTerms; ++c) A[r][c] -= f * A[i][c];
    }
  }
  coef = {};
  for (size_t i = 0; i < k; ++i) coef[cols[i]] = A[i][kFitTerms] / A[i][i];
  return true;
}

double relativeResidualPct(const Sample& x, const std::array<double, kFitTerms>& c) {
  const double pred = c[0] + c[1] * x.gflop + c[2] * x.mb + c[3] * x.mb_slow;
  return 100.0 * std::fabs(pred - x.ns) / std::max(x.ns, 1.0);
}

// With three or more distinct shapes: the best non-negative fit among
// base+a+b, base+a, base+b and base (the simplest within 1% of the best).
// With fewer, a base cannot be told from a slope, so one proportional term
// is fitted, chosen by arithmetic intensity like a roofline: FLOP-bound
// above 100 FLOP per byte (H100/H200 balance is about 200), bytes-bound below.
OpFitReport fitOp(OpKind op, const std::vector<Sample>& samples) {
  // Simplest first: one term, then two, then three; then the same seven
  // with the slow-path term (only solvable when some shape has slow-path
  // bytes).
  static constexpr std::array<std::array<bool, 3>, 7> kTerms{{{true, false, false},
                                                              {false, true, false},
                                                              {false, false, true},
                                                              {true, true, false},
                                                              {true, false, true},
                                                              {false, true, true},
                                                              {true, true, true}}};
  std::vector<std::array<bool, kFitTerms>> models;
  for (const bool slow : {false, true})
    for (const auto& t : kTerms) models.push_back({t[0], t[1], t[2], slow});
  OpFitReport best;
  best.op = op;
  best.samples = int64_t(samples.size());
  // One point per shape (its median): a shape measured 200 times must not
  // outvote one measured 6 times.
  std::map<std::string, std::vector<const Sample*>> by_shape;
  for (const Sample& x : samples) by_shape[x.shape].push_back(&x);
  std::vector<Sample> s;
  for (const auto& [shape, xs] : by_shape) {
    // Tasks of one shape key can still move different bytes (a layernorm
    // backward that accumulates into dx reads it too), so every term is
    // the shape's median, like its time.
    std::vector<double> ns, gflop, mb, mb_slow;
    for (const Sample* x : xs) {
      ns.push_back(x->ns);
      gflop.push_back(x->gflop);
      mb.push_back(x->mb);
      mb_slow.push_back(x->mb_slow);
    }
    Sample m{median(gflop), median(mb), median(ns), shape};
    m.mb_slow = median(mb_slow);
    s.push_back(m);
  }
  const auto& shapes = by_shape;
  std::array<double, kFitTerms> chosen{};
  if (shapes.size() >= 3) {
    std::vector<std::pair<double, std::array<double, kFitTerms>>> fits;  // (error, coefficients), simplest first
    for (const auto& use : models) {
      std::array<double, kFitTerms> c{};
      if (!solveWeighted(s, use, c) || c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0) continue;
      double err = 0;
      for (const Sample& x : s) err += std::pow(relativeResidualPct(x, c), 2);
      fits.push_back({err, c});
    }
    double least = INFINITY;
    for (const auto& f : fits) least = std::min(least, f.first);
    for (const auto& f : fits)
      if (f.first <= least * 1.01 + 1e-9) {
        chosen = f.second;
        break;
      }
  } else {
    double flops = 0, bytes = 0;
    for (const Sample& x : s) {
      flops += x.gflop * 1e9;
      bytes += x.mb * 1e6;
    }
    std::vector<double> ratios;
    const bool flop_bound = bytes <= 0 || flops / bytes >= 100.0;
    for (const Sample& x : s) {
      const double size = flop_bound ? x.gflop : x.mb;
      if (size > 0) ratios.push_back(x.ns / size);
    }
    if (ratios.empty()) {
      std::vector<double> ns;
      for (const Sample& x : s) ns.push_back(x.ns);
      chosen[0] = median(ns);
    } else {
      chosen[flop_bound ? 1 : 2] = median(ratios);
    }
  }
  best.base_ns = chosen[0];
  best.ns_per_gflop = chosen[1];
  best.ns_per_mb = chosen[2];
  best.ns_per_mb_slow = chosen[3];
  best.shapes = int64_t(shapes.size());
  std::vector<double> res;
  for (const Sample& x : samples) res.push_back(relativeResidualPct(x, chosen));
  best.median_residual_pct = median(res);
  best.max_residual_pct = res.empty() ? 0 : *std::max_element(res.begin(), res.end());
  return best;
}

double busFactor(CollectiveOp op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case CollectiveOp::AllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::AllToAll: return double(n - 1) / n;
    default: return 1.0;
  }
}

// Gaps between back-to-back activities of a stream are launch costs: the
// idle time before a kernel belongs to the task of that kernel (a matmul whose
// cuBLASLt call issues a memset and a GEMM pays two launches). Gaps of 20 us
// or more are waits (on another stream, an event, the host), which the
// simulation models itself, and are not counted; so is the gap before a task
// that waits for another stream's event (the weight-gradient stream's tasks
// wait for the compute stream's every time).
struct LaunchGaps {
  std::map<traces::TaskKey, double> per_task_per_step;  // ns, mean over the run's steps
  int64_t median_ns = 0;                                // over all counted gaps
};

LaunchGaps launchGaps(traces::TraceReader& reader, int64_t run, const Plan& plan) {
  auto waits = [&](const traces::ActivityRow& a) {
    try {
      const RankPlan& rp = plan.forRank(a.rank);
      return a.task_id >= 0 && a.task_id < int64_t(rp.tasks.size()) && !rp.tasks[size_t(a.task_id)].wait_events.empty();
    } catch (const std::out_of_range&) {
      return false;
    }
  };
  constexpr int64_t kWaitNs = 20000;
  LaunchGaps out;
  std::vector<double> all;
  std::map<int, int64_t> steps_per_rank;
  for (const auto& st : reader.steps(run)) steps_per_rank[st.rank]++;
  std::map<traces::TaskKey, double> total;
  int rank = -1, stream = -1;
  int64_t last_end = 0;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.kind == traces::ActivityKind::Host) return;
    if (a.rank == rank && a.stream == stream) {
      const int64_t gap = a.start_ns - last_end;
      if (gap >= 0 && gap < kWaitNs && !waits(a)) {
        all.push_back(double(gap));
        if (a.task_id >= 0) total[{a.rank, a.task_id}] += double(gap);
      }
      last_end = std::max(last_end, a.end_ns);
    } else {
      rank = a.rank;
      stream = a.stream;
      last_end = a.end_ns;
    }
  });
  for (const auto& [key, ns] : total) {
    const auto it = steps_per_rank.find(key.first);
    const double steps = it == steps_per_rank.end() ? 1.0 : double(std::max<int64_t>(1, it->second));
    out.per_task_per_step[key] = ns / steps;
  }
  out.median_ns = int64_t(std::llround(median(all)));
  return out;
}

// Per (rank, step): the step's time before its first GPU activity and after
// its last (the host launching the step's work and noticing its end).
std::vector<double> stepOverheads(traces::TraceReader& reader, int64_t run) {
  struct Span {
    int64_t start, end, first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  };
  std::map<int, std::vector<Span>> steps;
  for (const auto& st : reader.steps(run)) steps[st.rank].push_back({st.start_ns, st.end_ns});
  for (auto& [rank, v] : steps)
    std::sort(v.begin(), v.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.kind == traces::ActivityKind::Host) return;
    auto it = steps.find(a.rank);
    if (it == steps.end()) return;
    auto& v = it->second;
    auto pos = std::upper_bound(v.begin(), v.end(), a.start_ns, [](int64_t t, const Span& s) { return t < s.start; });
    if (pos == v.begin()) return;
    Span& s = *std::prev(pos);
    if (a.start_ns >= s.end) return;
    s.first = std::min(s.first, a.start_ns);
    s.last = std::max(s.last, a.end_ns);
  });
  std::vector<double> out;
  for (const auto& [rank, v] : steps)
    for (const Span& s : v)
      if (s.first <= s.last)
        out.push_back(double(std::max<int64_t>(0, s.first - s.start) + std::max<int64_t>(0, s.end - s.last)));
  return out;
}

// Per task of a run: its summed kernel time in each step, split by whether
// the task's first kernel started while a collective ran on its rank (the
// simulator slows exactly those tasks by comm_slowdown).
struct TaskSteps {
  std::vector<double> clean_ns;                      // steps run alone: no collective, no other compute stream
  std::vector<double> shared_ns;                     // no collective, but beside another compute stream's kernels
  std::vector<std::pair<double, double>> slowed_ns;  // (ns, share of it under a collective)
};

// A kernel's time counts as shared when more than this share of it ran
// beside another compute stream's kernels.
constexpr double kSharedShare = 0.05;

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

// Sorted and merged: no two intervals overlap or touch.
void mergeIntervals(Intervals& iv) {
  std::sort(iv.begin(), iv.end());
  Intervals merged;
  for (const auto& x : iv)
    if (!merged.empty() && x.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  iv = std::move(merged);
}

// |[a, b) ∩ iv| for merged intervals.
int64_t overlapWith(const Intervals& iv, int64_t a, int64_t b) {
  if (b <= a) return 0;
  auto pos = std::upper_bound(iv.begin(), iv.end(), std::make_pair(a, std::numeric_limits<int64_t>::max()));
  if (pos != iv.begin()) --pos;
  int64_t n = 0;
  for (; pos != iv.end() && pos->first < b; ++pos)
    n += std::max<int64_t>(0, std::min(b, pos->second) - std::max(a, pos->first));
  return n;
}

std::map<traces::TaskKey, TaskSteps> taskStepsByComm(traces::TraceReader& reader, int64_t run, const Plan& plan) {
  // Per rank, the collectives' transfers: from the last member's arrival
  // (the simulator slows kernels from the rank's arrival, and its ranks
  // arrive together).
  std::map<int, Intervals> comm;  // merged intervals per rank
  const std::vector<traces::CollectiveRow> collectives = reader.collectives(run);
  const std::vector<int64_t> transfer = transferStarts(collectives);
  for (size_t i = 0; i < collectives.size(); ++i)
    comm[collectives[i].rank].push_back({transfer[i], collectives[i].end_ns});
  for (auto& [rank, iv] : comm) mergeIntervals(iv);
  // |[a, b) ∩ the rank's communication|
  auto underComm = [&](int rank, int64_t a, int64_t b) {
    const auto it = comm.find(rank);
    return it == comm.end() ? int64_t{0} : overlapWith(it->second, a, b);
  };
  // Kernels of one rank on different streams (the weight-gradient stream
  // beside the compute stream) share the GPU. A kernel that ran o ns of its
  // d beside another is charged d - o / 2: exact for processor sharing. The
  // simulator's default (KernelSharing::FirstHolds) would make it d - o for
  // the kernel that started second, but on H200 both progress in the
  // overlaps the traces show (a holder's last wave leaves SMs free), and
  // charging the later one the whole overlap made a calibration from runs
  // with the stream off by up to 35% on a held-out job where this even split
  // stays within 7.3% (docs/accuracy.md, eleventh session).
  // Only compute tasks' kernels count: NCCL's kernels on the comm stream are
  // the collective itself (comm_slowdown's part), and charging kernels under
  // a collective half of it as shared made every slowed kernel look faster
  // than alone, so comm_slowdown fitted 1.
  auto computeKernel = [&](const traces::ActivityRow& a) {
    if (a.kind != traces::ActivityKind::Kernel || a.task_id < 0) return false;
    try {
      const RankPlan& p = plan.forRank(a.rank);
      return a.task_id < int64_t(p.tasks.size()) && !p.tasks[size_t(a.task_id)].collective;
    } catch (const std::out_of_range&) {
      return false;
    }
  };
  std::map<std::pair<int, int>, Intervals> kernels;  // (rank, stream) -> merged kernel intervals
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (computeKernel(a)) kernels[{a.rank, a.stream}].push_back({a.start_ns, a.end_ns});
  });
  for (auto& [key, iv] : kernels) mergeIntervals(iv);
  auto besideOtherKernels = [&](const traces::ActivityRow& a) {
    int64_t n = 0;
    for (auto it = kernels.lower_bound({a.rank, std::numeric_limits<int>::min()});
         it != kernels.end() && it->first.first == a.rank; ++it)
      if (it->first.second != a.stream) n += overlapWith(it->second, a.start_ns, a.end_ns);
    return std::min(n, a.end_ns - a.start_ns);
  };
  std::map<int, std::vector<int64_t>> step_starts;
  for (const auto& st : reader.steps(run)) step_starts[st.rank].push_back(st.start_ns);
  for (auto& [rank, starts] : step_starts) std::sort(starts.begin(), starts.end());
  struct StepSum {
    double ns = 0, under_comm_ns = 0, shared_ns = 0, raw_ns = 0;
  };
  std::map<traces::TaskKey, std::map<size_t, StepSum>> per_step;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.task_id < 0 || a.kind == traces::ActivityKind::Host) return;
    size_t step = 0;
    if (auto it = step_starts.find(a.rank); it != step_starts.end()) {
      const auto pos = std::upper_bound(it->second.begin(), it->second.end(), a.start_ns);
      step = pos == it->second.begin() ? 0 : size_t(pos - it->second.begin() - 1);
    }
    StepSum& sum = per_step[{a.rank, a.task_id}][step];
    const int64_t shared = a.kind == traces::ActivityKind::Kernel ? besideOtherKernels(a) : 0;
    sum.ns += double(a.end_ns - a.start_ns) - 0.5 * double(shared);
    sum.raw_ns += double(a.end_ns - a.start_ns);
    sum.shared_ns += double(shared);
    if (a.kind != traces::ActivityKind::Collective)
      sum.under_comm_ns += double(underComm(a.rank, a.start_ns, a.end_ns));
  });
  std::map<traces::TaskKey, TaskSteps> out;
  for (const auto& [key, steps] : per_step) {
    TaskSteps& ts = out[key];
    for (const auto& [step, v] : steps)
      if (v.under_comm_ns > 0)
        ts.slowed_ns.push_back({v.ns, v.under_comm_ns / std::max(v.ns, 1.0)});
      else if (v.shared_ns > kSharedShare * v.raw_ns)
        ts.shared_ns.push_back(v.ns);
      else
        ts.clean_ns.push_back(v.ns);
  }
  return out;
}

// Per (op kind, shape): the launch of each kernel task's main kernel (its
// longest traced kernel with a launch geometry), one entry per task of the
// run (CostModel::smRoomBeside; the block's resources where traced).
std::map<std::pair<OpKind, std::string>, std::vector<MainKernel>> mainKernels(traces::TraceReader& reader,
                                                                               int64_t run, const Plan& plan) {
  std::map<std::pair<OpKind, std::string>, std::vector<MainKernel>> out;
  for (const auto& [key, main] : mainKernelsByTask(reader, run)) {
    const RankPlan* program = nullptr;
    try {
      program = &plan.forRank(key.first);
    } catch (const std::out_of_range&) {
      continue;
    }
    if (key.second >= int64_t(program->tasks.size())) continue;
    const Task& task = program->tasks[size_t(key.second)];
    if (task.kind != TaskKind::Kernel || task.collective || task.fused_into >= 0) continue;
    MainKernel k = main;
    if (gemmOutputTiles(task) == 0) k.tile.reset();  // not a GEMM: a name's digits are no tile
    out[{costOpKind(task), shapeKey(task)}].push_back(k);
  }
  return out;
}

// The value most entries hold (the smallest of those tied).
int mostCommon(const std::vector<int>& v) {
  std::map<int, int> count;
  for (int x : v) ++count[x];
  int best = v.front(), most = 0;
  for (const auto& [x, n] : count)
    if (n > most) most = n, best = x;
  return best;
}

// One step of a one-rank run with a second compute stream: how long one
// kernel ran alone and how long several ran at once, and the kernel tasks
// that ran. With each task's time alone (from runs without the stream), the
// throughput of kernels side by side follows: the work done while several
// ran is the tasks' time alone minus the time one ran alone.
struct SharingStep {
  double single_ns = 0, multi_ns = 0;
  std::vector<std::pair<OpKind, std::string>> tasks;
};

std::vector<SharingStep> sharingSteps(traces::TraceReader& reader, int64_t run, const Plan& plan) {
  std::vector<SharingStep> out;
  if (plan.world_size != 1 || plan.programs.empty()) return out;  // collectives would slow them too
  const RankPlan& rp = plan.programs[0];
  if (std::count_if(rp.streams.begin(), rp.streams.end(),
                    [](const StreamInfo& x) { return x.kind == StreamKind::Compute; }) < 2)
    return out;
  std::vector<traces::StepRow> steps;
  for (const auto& st : reader.steps(run))
    if (st.rank == 0) steps.push_back(st);
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  std::vector<Intervals> kernels(steps.size());
  std::vector<std::set<int64_t>> tasks(steps.size());
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.rank != 0 || a.kind != traces::ActivityKind::Kernel || a.task_id < 0 ||
        a.task_id >= int64_t(rp.tasks.size()) || rp.tasks[size_t(a.task_id)].fused_into >= 0)
      return;
    const auto pos = std::upper_bound(steps.begin(), steps.end(), a.start_ns,
                                      [](int64_t t, const traces::StepRow& st) { return t < st.start_ns; });
    if (pos == steps.begin() || a.start_ns >= std::prev(pos)->end_ns) return;
    const size_t i = size_t(std::prev(pos) - steps.begin());
    kernels[i].push_back({a.start_ns, a.end_ns});
    tasks[i].insert(a.task_id);
  });
  for (size_t i = 0; i < steps.size(); ++i) {
    if (kernels[i].empty()) continue;
    std::vector<std::pair<int64_t, int>> edges;
    for (const auto& [a, b] : kernels[i]) edges.push_back({a, +1}), edges.push_back({b, -1});
    std::sort(edges.begin(), edges.end());  // at one time, ends (-1) before starts
    SharingStep st;
    int running = 0;
    int64_t last = edges.front().first;
    for (const auto& [t, d] : edges) {
      if (running == 1) st.single_ns += double(t - last);
      if (running > 1) st.multi_ns += double(t - last);
      running += d;
      last = t;
    }
    for (int64_t id : tasks[i]) {
      const Task& task = rp.tasks[size_t(id)];
      st.tasks.push_back({costOpKind(task), shapeKey(task)});
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace

std::optional<double> multiRankLaunchExtra(const LaunchGapsByShape& gaps, int64_t* shapes_used) {
  auto mean = [](const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t / double(v.size());
  };
  double weighted = 0, weight = 0;
  int64_t shapes = 0;
  for (const auto& [key, multi] : gaps.multi) {
    const auto single = gaps.single.find(key);
    if (single == gaps.single.end() || single->second.empty() || multi.empty()) continue;
    weighted += (mean(multi) - mean(single->second)) * double(multi.size());
    weight += double(multi.size());
    ++shapes;
  }
  if (shapes_used) *shapes_used = shapes;
  if (shapes == 0) return std::nullopt;
  return std::max(0.0, weighted / weight);
}

std::map<int, double> forwardSpeedByRank(const std::map<traces::TaskKey, traces::TaskTime>& times, const Plan& plan) {
  std::map<int, double> out;
  if (plan.world_size < 2) return out;
  auto forwardKernel = [&](int rank, int64_t id) {
    try {
      const RankPlan& p = plan.forRank(rank);
      if (id < 0 || id >= int64_t(p.tasks.size())) return false;
      const Task& t = p.tasks[size_t(id)];
      return t.phase == Phase::Forward && t.kind == TaskKind::Kernel && !t.collective && t.fused_into < 0;
    } catch (const std::out_of_range&) {
      return false;
    }
  };
  std::map<int, std::pair<double, double>> sums;  // rank -> (rank 0's time, its own) over shared tasks
  for (const auto& [key, t] : times) {
    if (key.first == 0 || !forwardKernel(key.first, key.second)) continue;
    const auto zero = times.find({0, key.second});
    if (zero == times.end() || zero->second.ns <= 0 || t.ns <= 0) continue;
    sums[key.first].first += zero->second.ns;
    sums[key.first].second += t.ns;
  }
  for (const auto& [rank, s] : sums) out[rank] = s.first / s.second;
  return out;
}

// What a run's devices_json says of its GPUs and software (the store's
// device record: docs/trace-schema.md): the distinct device models or names
// joined ("" when it names none), and the first device's driver and library
// versions ("" when not recorded).
RunDevices runDevices(const std::string& devices_json) {
  RunDevices out;
  const auto devices = nlohmann::json::parse(devices_json, nullptr, /*allow_exceptions=*/false);
  if (!devices.is_array()) return out;
  std::set<std::string> names;
  for (const auto& d : devices) {
    if (!d.is_object()) continue;
    // A simulated run names each rank's device and gives its model.
    for (const char* key : {"model", "name"})
      if (auto it = d.find(key); it != d.end() && it->is_string() && !it->get<std::string>().empty()) {
        names.insert(it->get<std::string>());
        break;
      }
    if (!out.software.empty()) continue;
    std::string sw;
    for (const char* key : {"driver", "cuda_runtime", "cublaslt", "nccl"})
      if (auto it = d.find(key); it != d.end() && it->is_string())
        sw += (sw.empty() ? "" : ", ") + std::string(key) + " " + it->get<std::string>();
    out.software = sw;
  }
  for (const std::string& n : names) out.gpus += (out.gpus.empty() ? "" : " + ") + n;
  return out;
}

namespace {

// A collective with kernels beside it: its group (op, ranks), its sample and
// the task role of the kernels beside it the longest.
struct BesideSample {
  std::pair<CollectiveOp, int> group;
  CollSample sample;
  std::string role;
};

// What calibrateFromRuns gathers from every run of every input before it
// fits anything: readRun adds one run, the fitting stages read it.
struct CalibrationSamples {
  std::map<int, std::vector<double>> rank_speeds;  // per rank, one per multi-rank run
  std::map<OpKind, std::vector<Sample>> samples;
  std::map<std::pair<CollectiveOp, int>, std::vector<CollSample>> coll;
  std::vector<BesideSample> beside;  // collectives with kernels beside them
  std::vector<double> launch_gaps;
  std::vector<double> start_waits;  // collectiveStartWaits of the multi-rank runs
  std::set<OpKind> planned_ops;  // kernel op kinds of the re-planned jobs
  std::map<OpKind, std::vector<Sample>> slowed;        // task-steps with kernel time under a collective
  std::map<OpKind, std::vector<Sample>> kernel_clean;  // clean medians, kernel time only
  std::vector<SharingStep> sharing_steps;              // one-rank runs with a second compute stream
  std::vector<double> step_overheads;
  LaunchGapsByShape gaps_by_shape;
  // A calibration describes one kind of GPU: the first run that names its
  // GPUs sets it, and a run on another kind stops the fit. Software versions
  // may differ between runs; the provenance then says so.
  std::string gpus, gpus_from;
  // Each kernel task's main kernel, by shape (mainKernels).
  std::map<std::pair<OpKind, std::string>, std::vector<MainKernel>> kernels_by_shape;
  std::map<std::string, std::vector<std::string>> runs_by_software;
  bool any_sweep = false;  // some input is a sweep run: every shape says where it came from
  // Weight-gradient shapes whose tasks also summed a bias gradient (GPT-2's
  // linear layers): their time is not the GEMM's alone.
  std::set<std::pair<OpKind, std::string>> with_bias_gradient;
};

// The runs of one input: the one it names, else every real run of its file.
std::vector<int64_t> runsOfInput(traces::TraceReader& reader, const CalibrationInput& in) {
  std::vector<int64_t> runs;
  if (in.run >= 0) {
    runs.push_back(reader.run(in.run).id);
  } else {
    for (const auto& r : reader.runs())
      if (r.kind == traces::RunKind::Real) runs.push_back(r.id);
    if (runs.empty())
      throw std::runtime_error(fmt::format("{}: no real run to calibrate from (pick one with FILE:RUN)", in.path));
  }
  return runs;
}

// Records the GPUs and software versions the run names; throws when its GPUs
// are of another kind than an earlier run's.
void checkRunDevices(CalibrationSamples& acc, const CalibrationInput& in, int64_t run, const traces::RunInfo& info,
                     const std::string& where) {
  if (const RunDevices d = runDevices(info.devices_json); !d.gpus.empty()) {
    if (acc.gpus.empty()) {
      acc.gpus = d.gpus;
      acc.gpus_from = where;
    } else if (d.gpus != acc.gpus) {
      throw std::runtime_error(fmt::format(
          "{}: run {} ran on {}, but {} ran on {}; a calibration describes one kind of GPU: fit each kind "
          "from its own runs",
          in.path, run, d.gpus, acc.gpus_from, acc.gpus));
    }
    if (!d.software.empty()) acc.runs_by_software[d.software].push_back(where);
  }
}

// The run's main kernels' thread blocks by shape, and its steps with kernels
// of two compute streams side by side.
void addKernelFigures(CalibrationSamples& acc, traces::TraceReader& reader, int64_t run, const Plan& plan) {
  for (auto& [key, v] : mainKernels(reader, run, plan))
    acc.kernels_by_shape[key].insert(acc.kernels_by_shape[key].end(), v.begin(), v.end());
  for (SharingStep& st : sharingSteps(reader, run, plan)) acc.sharing_steps.push_back(std::move(st));
}

// The run's figures that are not per task: collective start waits, step
// overheads, ranks' speeds, the median launch gap and the planned op kinds.
void addRunFigures(CalibrationSamples& acc, CalibrationResult& out, traces::TraceReader& reader, int64_t run,
                   const Plan& plan, const std::map<traces::TaskKey, traces::TaskTime>& times,
                   const RunKernelsAndCollectives& beside_run, const LaunchGaps& gaps) {
  for (double share : collectiveStartWaits(beside_run, plan)) acc.start_waits.push_back(share);
  for (double ns : stepOverheads(reader, run)) acc.step_overheads.push_back(ns);
  if (plan.world_size > 1) {
    for (const auto& [rank, speed] : forwardSpeedByRank(times, plan)) acc.rank_speeds[rank].push_back(speed);
    ++out.rank_speed_runs;
  }
  acc.launch_gaps.push_back(double(gaps.median_ns));
  for (const auto& rp : plan.programs)
    for (const Task& task : rp.tasks)
      if (!task.collective && task.kind == TaskKind::Kernel && task.fused_into < 0)
        acc.planned_ops.insert(costOpKind(task));
}

// One run's collectives by plan task id: each one's group and sample, and
// the rank that measured its shortest time.
struct RunCollectives {
  std::map<int64_t, std::pair<std::pair<CollectiveOp, int>, CollSample>> by_task;
  std::map<int64_t, int> rank;  // the rank that measured each one's shortest time
};

// A collective task's time on one rank, kept when it is the shortest so far.
void addCollectiveTime(RunCollectives& rc, const Plan& plan, const RankPlan& program, const Task& task,
                       const traces::TaskKey& key, const traces::TaskTime& t) {
  // A collective on a compute stream (the sharded optimizer's
  // 4-byte norm sum) starts with the ranks already in step and
  // measures launch latency alone; in the fit it bent the buckets'
  // line (latency 18.5 -> 8.1 us, the 3.5 MB point 169 -> 128 GB/s).
  // Only the comm streams' collectives are fitted.
  if (program.streams.at(size_t(task.stream)).kind != StreamKind::Comm) return;
  int n = 1;
  for (const auto& g : plan.groups)
    if (g.name == task.collective->group) n = int(g.ranks.size());
  // A rank that reaches a collective early waits inside the NCCL
  // kernel for the others; the member that arrived last measures
  // the collective itself, so each collective keeps its shortest
  // time over the ranks.
  CollSample cs{busFactor(task.collective->op, n) * double(task.collective->bytes), t.ns};
  auto [it, fresh] = rc.by_task.try_emplace(key.second, std::make_pair(std::make_pair(task.collective->op, n), cs));
  if (fresh || t.ns < it->second.second.ns) {
    it->second.second.ns = t.ns;
    rc.rank[key.second] = key.first;
  }
}

// A task's sample for its op kind's fit: from its clean steps when it has
// some (those also go to kernel_clean, kernel time only), else from its
// steps beside the other compute stream, else from its slowed steps or its
// whole time. `split` is null when taskStepsByComm has no steps of it.
void addCostSample(CalibrationSamples& acc, OpKind op, const Sample& base, const TaskSteps* split, double task_ns,
                   double launch_ns) {
  if (split && !split->clean_ns.empty()) {
    Sample x = base;
    x.ns = median(split->clean_ns);
    acc.kernel_clean[op].push_back(x);
    x.ns += launch_ns;
    x.launch_ns = launch_ns;
    acc.samples[op].push_back(x);
  } else if (split && !split->shared_ns.empty()) {
    // Only measured beside the other compute stream's kernels: charged
    // as shared evenly (taskStepsByComm), and left out of the fit
    // where the shape was also measured alone (dropSharedWhereAlone).
    Sample x = base;
    x.ns = median(split->shared_ns) + launch_ns;
    x.launch_ns = launch_ns;
    x.shared = true;
    acc.samples[op].push_back(x);
  } else {
    // Never measured without a collective beside it (a data-parallel
    // run only): its slowed time is still better than no figure, and
    // the op must not pass for a fused one.
    // The per-step times of taskStepsByComm carry the charge for
    // kernels side by side; t.ns does not.
    Sample x = base;
    x.ns = task_ns;
    if (split && !split->slowed_ns.empty()) {
      std::vector<double> steps;
      for (const auto& [ns, share] : split->slowed_ns) steps.push_back(ns);
      x.ns = median(steps);
    }
    x.ns += launch_ns;
    x.launch_ns = launch_ns;
    acc.samples[op].push_back(x);
  }
}

// A task that is not a collective: its launch gap by shape, its sample for
// its op kind's fit and one slowed sample per step under a collective.
void addOpSamples(CalibrationSamples& acc, const Task& task, const traces::TaskKey& key, const traces::TaskTime& t,
                  bool multi_rank, const LaunchGaps& gaps, const std::map<traces::TaskKey, TaskSteps>& by_comm) {
  const auto gap = gaps.per_task_per_step.find(key);
  const double launch_ns = gap == gaps.per_task_per_step.end() ? 0.0 : gap->second;
  Sample base{task.flops / 1e9, double(task.bytes_read + task.bytes_written) / 1e6, 0.0, shapeKey(task)};
  base.mb_slow = slowPathMb(task);
  base.multi_rank = multi_rank;
  if (task.op == OpKind::MatmulBwdWeight && task.attrs.has_bias)
    acc.with_bias_gradient.insert({costOpKind(task), base.shape});
  if (task.kind == TaskKind::Kernel)
    (multi_rank ? acc.gaps_by_shape.multi : acc.gaps_by_shape.single)[{costOpKind(task), base.shape}]
        .push_back(launch_ns);
  // Steps in which a collective was resident during the task measure
  // the slowed kernel: they fit comm_slowdown, not the op's cost.
  const auto found = by_comm.find(key);
  const TaskSteps* split = found == by_comm.end() ? nullptr : &found->second;
  addCostSample(acc, costOpKind(task), base, split, t.ns, launch_ns);
  if (split)
    for (const auto& [ns, share] : split->slowed_ns) {
      Sample y = base;
      y.ns = ns;  // kernel time only: the slowdown is a property of the kernels
      y.under_comm = share;
      acc.slowed[costOpKind(task)].push_back(y);
    }
}

// Every measured task of the run: a collective's time goes to the returned
// collectives, any other task's samples to acc. Counts the samples and the
// task ids outside the plan in out.
RunCollectives addRunTasks(CalibrationSamples& acc, CalibrationResult& out, const Plan& plan,
                           const std::map<traces::TaskKey, traces::TaskTime>& times, const LaunchGaps& gaps,
                           const std::map<traces::TaskKey, TaskSteps>& by_comm) {
  RunCollectives rc;
  for (const auto& [key, t] : times) {
    const RankPlan* program = nullptr;
    try {
      program = &plan.forRank(key.first);
    } catch (const std::out_of_range&) {
    }
    if (!program || key.second < 0 || key.second >= int64_t(program->tasks.size())) {
      ++out.unmatched;
      continue;
    }
    const Task& task = program->tasks[size_t(key.second)];
    // Its work is in another task's fused kernel: whatever a trace shows
    // for it (nothing from the GPU, a zero-length activity from a
    // simulation) is not a duration of its op kind.
    if (task.fused_into >= 0) continue;
    ++out.samples;
    if (task.collective)
      addCollectiveTime(rc, plan, *program, task, key, t);
    else
      addOpSamples(acc, task, key, t, plan.world_size > 1, gaps, by_comm);
  }
  return rc;
}

// The run's collectives into the collective fit's samples; those the run's
// kernels ran beside also into acc.beside, with the kernels' role.
void addRunCollectives(CalibrationSamples& acc, RunCollectives& rc,
                       const std::map<traces::TaskKey, std::string>& beside_roles) {
  for (const auto& [task_id, c] : rc.by_task) {
    acc.coll[c.first].push_back(c.second);
    const auto role = beside_roles.find({rc.rank[task_id], task_id});
    if (role != beside_roles.end())
      acc.beside.push_back({c.first, c.second, role->second.empty() ? std::string(kNoKernelBeside) : role->second});
  }
}

// Reads one run of an input into acc: its devices, its run-wide figures and
// its tasks' samples. The run's notes and provenance go to out.
void readRun(CalibrationSamples& acc, CalibrationResult& out, const CalibrationInput& in,
             traces::TraceReader& reader, int64_t run) {
  const traces::RunInfo info = reader.run(run);
  const std::string where = fmt::format("{} run {}", std::filesystem::path(in.path).filename().string(), run);
  checkRunDevices(acc, in, run, info, where);
  // The plan the run stored; a run from before plans were stored has
  // its job planned again, which the notes say.
  std::string note;
  const Plan plan = plan_trace::planOfRun(reader, run, &note);
  if (!note.empty()) out.notes.push_back(note);
  const auto times = traces::taskTimesPerStep(reader, run);
  const auto by_comm = taskStepsByComm(reader, run, plan);
  if (times.empty())
    throw std::runtime_error(fmt::format("{}: run {} has no activities with plan task ids", in.path, run));
  const LaunchGaps gaps = launchGaps(reader, run, plan);
  addKernelFigures(acc, reader, run, plan);
  const RunKernelsAndCollectives beside_run = plan.world_size > 1 ? readKernelsAndCollectives(reader, run, plan)
                                                                  : RunKernelsAndCollectives{};
  addRunFigures(acc, out, reader, run, plan, times, beside_run, gaps);
  const auto beside_roles = rolesBesideCollectives(beside_run, plan);
  RunCollectives rc = addRunTasks(acc, out, plan, times, gaps, by_comm);
  addRunCollectives(acc, rc, beside_roles);
  // The file name only: provenance must not leak the machine's folders.
  out.provenance.push_back(fmt::format("{} run {} \"{}\" ({}; host {}; {}; devices {})",
                                       std::filesystem::path(in.path).filename().string(), run, info.name,
                                       traces::toString(info.kind), info.host, info.tool_version,
                                       info.devices_json.empty() ? "unknown" : info.devices_json));
}

// A provenance line naming the runs of each driver and library version,
// when the runs used more than one.
void noteSoftwareVersions(const CalibrationSamples& acc, CalibrationResult& out) {
  if (acc.runs_by_software.size() > 1) {
    std::string note = "the runs used different driver or library versions:";
    for (const auto& [sw, where] : acc.runs_by_software) {
      note += " " + sw + " (";
      for (size_t i = 0; i < where.size(); ++i) note += (i ? ", " : "") + where[i];
      note += ");";
    }
    note.pop_back();
    out.provenance.push_back(note);
  }
}

// The calibration's keys that are medians over the runs: launch and step
// overheads, collective start wait and the ranks' speeds; and its source and GPU.
void fitRunFigures(const CalibrationSamples& acc, CalibrationResult& out) {
  out.calibration.source = "tandem calibrate";
  out.calibration.gpu = acc.gpus;
  if (!acc.launch_gaps.empty()) out.calibration.launch_overhead_ns = int64_t(std::llround(median(acc.launch_gaps)));
  if (!acc.step_overheads.empty())
    out.calibration.step_overhead_ns = int64_t(std::llround(median(acc.step_overheads)));
  if (!acc.start_waits.empty()) {
    out.calibration.collective_start_wait = std::clamp(median(acc.start_waits), 0.0, 1.0);
    out.collective_start_wait_samples = int64_t(acc.start_waits.size());
  }
  for (const auto& [rank, v] : acc.rank_speeds) out.rank_speed[rank] = median(v);
}

// Kernel tasks wait longer before they start in multi-rank runs (measured
// on 2 x H200: about 0.9 us per task, forward tasks included). Samples of
// such runs are written as one-rank costs; the simulation adds the extra
// back to plans of more than one rank.
void fitMultiRankLaunch(CalibrationSamples& acc, CalibrationResult& out) {
  if (const auto extra = multiRankLaunchExtra(acc.gaps_by_shape, &out.multi_rank_launch_shapes)) {
    out.calibration.multi_rank_launch_ns = int64_t(std::llround(*extra));
    for (auto& [op, s] : acc.samples)
      for (Sample& x : s)
        if (x.multi_rank) x.ns -= std::min(*extra, x.launch_ns);
  }
}

// A shape measured alone somewhere is costed from those measurements
// only: a kernel's share of the GPU beside another stream's kernels is
// not even (a GEMM takes most of it), so shared times only stand in for
// shapes never seen alone.
void dropSharedWhereAlone(std::map<OpKind, std::vector<Sample>>& samples) {
  for (auto& [op, s] : samples) {
    std::set<std::string> alone;
    for (const Sample& x : s)
      if (!x.shared) alone.insert(x.shape);
    s.erase(std::remove_if(s.begin(), s.end(), [&](const Sample& x) { return x.shared && alone.count(x.shape); }),
            s.end());
  }
}

// Per op kind: the fit over its samples, each measured shape's median time
// and the thread blocks most of its main kernels had.
void fitOps(const CalibrationSamples& acc, CalibrationResult& out) {
  // FP8 GEMMs and FP8 writers (isFp8ShapeKey, cost_model.h) are other
  // kernels than the bf16 ones: their shapes are kept, but the op kind's fit
  // and default blocks, which bf16 shapes no run measured fall back on, come
  // from the bf16 samples alone (an FP8 run's fit made bf16 GEMMs 30% fast).
  for (const auto& [op, s] : acc.samples) {
    std::vector<Sample> fit_samples;
    for (const Sample& x : s)
      if (!isFp8ShapeKey(x.shape)) fit_samples.push_back(x);
    OpCalibration& oc = out.calibration.ops[op];
    // The traces are taken for this build's kernels (the sweep records its
    // own; runs of an older build would need fitting by that build).
    out.calibration.kernel_revisions[op] = kernelRevision(op);
    if (!fit_samples.empty()) {
      const OpFitReport rep = fitOp(op, fit_samples);
      oc.all_shapes.has_fit = true;
      oc.all_shapes.base_ns = rep.base_ns;
      oc.all_shapes.ns_per_gflop = rep.ns_per_gflop;
      oc.all_shapes.ns_per_mb = rep.ns_per_mb;
      oc.all_shapes.ns_per_mb_slow = rep.ns_per_mb_slow;
      out.ops.push_back(rep);
    }
    // A shape measured by profiled runs takes their time; the sweep's
    // samples stand in for shapes no run measured.
    std::set<std::string> by_runs;
    for (const Sample& x : s)
      if (!x.sweep) by_runs.insert(x.shape);
    std::map<std::string, std::vector<const Sample*>> by_shape;
    for (const Sample& x : s)
      if (!x.sweep || !by_runs.count(x.shape)) by_shape[x.shape].push_back(&x);
    std::vector<int> op_blocks;  // every task's of the op kind: its default for shapes not measured
    for (const auto& [shape, xs] : by_shape) {
      std::vector<double> ns, gflop, mb;
      for (const Sample* x : xs) ns.push_back(x->ns), gflop.push_back(x->gflop), mb.push_back(x->mb);
      CostEntry e;
      e.ns = int64_t(std::llround(median(ns)));
      e.gflop = median(gflop);
      e.mb = median(mb);
      if (acc.any_sweep) e.origin = by_runs.count(shape) ? ShapeOrigin::Runs : ShapeOrigin::Sweep;
      if (const auto b = acc.kernels_by_shape.find({op, shape}); b != acc.kernels_by_shape.end()) {
        std::vector<int> blocks;
        for (const MainKernel& k : b->second) blocks.push_back(k.blocks);
        e.blocks = mostCommon(blocks);
        if (!isFp8ShapeKey(shape)) op_blocks.insert(op_blocks.end(), blocks.begin(), blocks.end());
        // The resources of a launch with those blocks, where traced.
        for (const MainKernel& k : b->second)
          if (k.blocks == e.blocks && k.threads > 0) {
            e.threads = k.threads, e.registers = k.registers, e.shared_bytes = k.shared_bytes, e.cluster = k.cluster;
            break;
          }
        // And its GEMM tile (traces without the resources name it too).
        for (const MainKernel& k : b->second)
          if (k.blocks == e.blocks && k.tile) {
            e.tile = k.tile;
            break;
          }
      }
      oc.shapes[shape] = e;
    }
    if (!op_blocks.empty()) oc.all_shapes.blocks = mostCommon(op_blocks);
  }
}

// Times by (op kind, shape).
using ShapeTimes = std::map<std::pair<OpKind, std::string>, std::vector<double>>;

// Per (op kind, shape): the kernel times of its clean steps, launch gaps
// excluded (what comm_slowdown and kernel_overlap_efficiency compare with).
ShapeTimes cleanKernelNs(const std::map<OpKind, std::vector<Sample>>& kernel_clean) {
  ShapeTimes clean_kernel_ns;
  for (const auto& [op, xs] : kernel_clean)
    for (const Sample& x : xs) clean_kernel_ns[{op, x.shape}].push_back(x.ns);
  return clean_kernel_ns;
}

// Kernels side by side (kernel_overlap_efficiency): per step of a run with
// the weight-gradient stream whose every task was also measured alone,
// (sum of the tasks' time alone - time one kernel ran alone) / time
// several ran; the median over such steps. Without such steps the
// simulation shares evenly (1), as the shared samples were charged.
void fitKernelOverlap(const std::vector<SharingStep>& sharing_steps, const ShapeTimes& clean_kernel_ns,
                      CalibrationResult& out) {
  std::vector<double> e;
  for (const SharingStep& st : sharing_steps) {
    if (st.multi_ns < 0.01 * (st.single_ns + st.multi_ns)) continue;
    double alone = 0;
    bool known = true;
    for (const auto& key : st.tasks) {
      const auto it = clean_kernel_ns.find(key);
      if (it == clean_kernel_ns.end()) {
        known = false;
        break;
      }
      alone += median(it->second);
    }
    if (known) e.push_back((alone - st.single_ns) / st.multi_ns);
  }
  out.calibration.kernel_overlap_efficiency = e.empty() ? 1.0 : std::clamp(median(e), 0.5, 2.0);
  out.kernel_overlap_samples = int64_t(e.size());
}

// comm_slowdown f: the simulator runs a kernel f times slower while a
// collective is resident on its rank, so a task-step with a share s of its
// time under one takes clean * (1 + (f - 1) s). Least squares of
// (measured / clean - 1) on s over every such task-step gives f - 1; the
// clean time is the kernel time of the shape's clean steps (launch gaps
// excluded on both sides).
void fitCommSlowdown(const std::map<OpKind, std::vector<Sample>>& slowed, const ShapeTimes& clean_kernel_ns,
                     CalibrationResult& out) {
  // The same fit per op kind too: a weight-gradient GEMM beside NCCL loses
  // more than a data-gradient GEMM does. A kind gets its own factor with
  // kMinSlowedSamples task-steps or more; the others keep the pooled one.
  constexpr int64_t kMinSlowedSamples = 40;
  double sxy = 0, sxx = 0;
  int64_t used = 0;
  for (const auto& [op, xs] : slowed) {
    double op_sxy = 0, op_sxx = 0;
    int64_t op_used = 0;
    for (const Sample& x : xs) {
      const auto it = clean_kernel_ns.find({op, x.shape});
      if (it == clean_kernel_ns.end()) continue;
      const double clean = median(it->second);
      if (clean <= 0) continue;
      op_sxy += x.under_comm * (x.ns / clean - 1.0);
      op_sxx += x.under_comm * x.under_comm;
      ++op_used;
    }
    sxy += op_sxy, sxx += op_sxx, used += op_used;
    if (op_used >= kMinSlowedSamples && op_sxx > 0) {
      out.calibration.comm_slowdown_by_op[op] = std::clamp(1.0 + op_sxy / op_sxx, 1.0, 3.0);
      out.comm_slowdown_by_op_samples[op] = op_used;
    }
  }
  if (sxx > 0) {
    out.calibration.comm_slowdown = std::clamp(1.0 + sxy / sxx, 1.0, 3.0);
    out.comm_slowdown_samples = used;
  }
}

// Op kinds the plans have but no run measured: the executor issues no
// kernel of their own (it fuses their work into another task, e.g. the
// cross-entropy backward into the forward's kernel), so they cost nothing.
void addFusedOps(const CalibrationSamples& acc, CalibrationResult& out) {
  for (OpKind op : acc.planned_ops)
    if (!acc.samples.count(op)) {
      out.calibration.ops[op].all_shapes.ns = 0;
      out.fused_ops.push_back(op);
    }
}

// A collective group's (op, ranks) line over its samples: latency, bandwidth
// and the largest residual; its sizes are left to sizeBandwidths.
CollectiveFitReport fitCollectiveLine(const std::pair<CollectiveOp, int>& key, const std::vector<CollSample>& s) {
  CollectiveFitReport rep;
  rep.op = key.first;
  rep.ranks = key.second;
  rep.samples = int64_t(s.size());
  // ns = latency + bus_bytes / gbps: a line through the samples (ordinary
  // least squares; with a single size, all time is bandwidth time).
  std::vector<Sample> pts;
  for (const auto& c : s) pts.push_back({c.bus_bytes / 1e9, 0, c.ns, ""});
  std::array<double, kFitTerms> c{};
  if (!(solveWeighted(pts, {true, true, false, false}, c) && c[0] >= 0 && c[1] > 0)) {
    c = {};
    solveWeighted(pts, {false, true, false, false}, c);
  }
  rep.latency_ns = int64_t(std::llround(c[0]));
  // c[1] is ns per bus GB, so the bandwidth in GB/s is 1e9 / c[1].
  rep.gbps = c[1] > 0 ? 1e9 / c[1] : 0;
  for (const Sample& p : pts) rep.max_residual_pct = std::max(rep.max_residual_pct, relativeResidualPct(p, c));
  return rep;
}

// The bandwidth measured sizes reached (median over the samples, less
// the fitted latency): NCCL is faster per byte on large messages than one
// line says. Sizes within kSizePoolRatio of each other make one point:
// a bucket's time moves by up to 10% with the kernels that run beside it
// (docs/accuracy.md), far more than the size effect over such a span, so
// one point per size would learn the calibration job's neighbours of each
// bucket and hand them to other jobs' buckets of that size.
std::vector<std::pair<double, double>> sizeBandwidths(const CollectiveFitReport& rep,
                                                      const std::vector<CollSample>& s) {
  std::map<double, std::vector<double>> by_size;
  for (const auto& x : s) by_size[x.bus_bytes].push_back(x.ns);
  std::vector<std::pair<double, double>> sizes;
  const double bus_factor = busFactor(rep.op, rep.ranks);
  std::vector<std::pair<double, double>> pool;  // (message bytes, bus GB/s) of each sample in the pool
  const auto flush = [&] {
    if (pool.empty()) return;
    std::vector<double> bytes, gbps;
    for (const auto& [b, g] : pool) bytes.push_back(b), gbps.push_back(g);
    sizes.push_back({std::round(median(bytes)), median(gbps)});
    pool.clear();
  };
  for (const auto& [bus_bytes, ns] : by_size) {
    const double bytes = bus_factor > 0 ? bus_bytes / bus_factor : bus_bytes;  // the message size
    if (bytes < double(1 << 20)) continue;
    if (!pool.empty() && bytes > pool.front().first * kSizePoolRatio) flush();
    for (double t : ns) {
      const double transfer_ns = t - double(rep.latency_ns);
      if (transfer_ns > 0) pool.push_back({bytes, bus_bytes / transfer_ns});
    }
  }
  flush();
  return sizes;
}

// A collective group's calibration (when it has a bandwidth) and report.
void fitCollective(const std::pair<CollectiveOp, int>& key, const std::vector<CollSample>& s,
                   CalibrationResult& out) {
  CollectiveFitReport rep = fitCollectiveLine(key, s);
  const CollectiveCalibration cc{rep.op, rep.ranks, rep.latency_ns, rep.gbps, sizeBandwidths(rep, s)};
  rep.sizes = cc.sizes;
  if (rep.gbps > 0) out.calibration.collectives.push_back(cc);
  out.collectives.push_back(rep);
}

// How much longer (or shorter) than the pooled size model a collective
// took, by the role of the kernels beside it the longest: the pools
// average over the calibration jobs' neighbours, the factor puts each
// neighbour back. Only sizes the pools describe (1 MiB and more).
std::map<std::string, std::vector<double>> besideRatios(const std::vector<BesideSample>& beside,
                                                        const CalibrationResult& out) {
  std::map<std::string, std::vector<double>> ratios;
  for (const BesideSample& b : beside) {
    const CollectiveCalibration* cc = nullptr;
    for (const auto& c : out.calibration.collectives)
      if (c.op == b.group.first && c.ranks == b.group.second) cc = &c;
    const double bus_factor = busFactor(b.group.first, b.group.second);
    const double bytes = bus_factor > 0 ? b.sample.bus_bytes / bus_factor : b.sample.bus_bytes;
    if (!cc || bytes < double(1 << 20)) continue;
    const double gbps = cc->gbpsFor(bytes);
    if (gbps <= 0) continue;
    const double model_ns = double(cc->latency_ns) + b.sample.bus_bytes / gbps;
    if (model_ns > 0) ratios[b.role].push_back(b.sample.ns / model_ns);
  }
  return ratios;
}

// The simulator can only stretch a collective beyond its flows, so the
// size model is scaled with the factors (fitCollectiveBeside).
void applyCollectiveBeside(const std::map<std::string, std::vector<double>>& ratios, CalibrationResult& out) {
  if (ratios.empty()) return;
  std::map<std::string, RoleRatio> by_role;
  for (const auto& [role, v] : ratios) by_role[role] = {median(v), int64_t(v.size())};
  const BesideFit fit = fitCollectiveBeside(by_role);
  for (auto& c : out.calibration.collectives) {
    c.latency_ns = int64_t(std::llround(double(c.latency_ns) * fit.model_scale));
    c.gbps /= fit.model_scale;
    for (auto& [bytes, gbps] : c.sizes) gbps /= fit.model_scale;
  }
  for (CollectiveFitReport& rep : out.collectives) {
    rep.latency_ns = int64_t(std::llround(double(rep.latency_ns) * fit.model_scale));
    rep.gbps /= fit.model_scale;
    for (auto& [bytes, gbps] : rep.sizes) gbps /= fit.model_scale;
  }
  for (const CollectiveBesideReport& b : fit.reports) {
    out.calibration.collective_beside[b.role] = b.factor;
    out.collective_beside.push_back(b);
  }
}

}  // namespace

CalibrationResult calibrateFromRuns(const std::vector<CalibrationInput>& inputs) {
  CalibrationResult out;
  // Fitted (kernel_overlap_efficiency by simulation too) under the replay's
  // fixed-grid rule.
  out.calibration.fixed_grid_guests = true;
  CalibrationSamples acc;
  for (const CalibrationInput& in : inputs) {
    traces::TraceReader reader(in.path);
    for (int64_t run : runsOfInput(reader, in)) {
      std::map<OpKind, size_t> before;
      for (const auto& [op, s] : acc.samples) before[op] = s.size();
      readRun(acc, out, in, reader, run);
      if (!in.sweep) continue;
      acc.any_sweep = true;
      for (auto& [op, s] : acc.samples)
        for (size_t i = before.count(op) ? before[op] : 0; i < s.size(); ++i) s[i].sweep = true;
    }
  }

  noteSoftwareVersions(acc, out);
  fitRunFigures(acc, out);
  fitMultiRankLaunch(acc, out);
  dropSharedWhereAlone(acc.samples);
  fitOps(acc, out);
  out.with_bias_gradient = acc.with_bias_gradient;
  deriveFp8Speedup(out);
  deriveFp8WriterSlowdown(out);
  const ShapeTimes clean_kernel_ns = cleanKernelNs(acc.kernel_clean);
  fitKernelOverlap(acc.sharing_steps, clean_kernel_ns, out);
  fitCommSlowdown(acc.slowed, clean_kernel_ns, out);
  addFusedOps(acc, out);
  for (const auto& [key, s] : acc.coll) fitCollective(key, s, out);
  applyCollectiveBeside(besideRatios(acc.beside, out), out);
  return out;
}

std::string fixedGridGuestsLine() {
  return "fixed_grid_guests: true  # memory-bound kernels of at most two blocks per SM gain nothing on the SMs a "
         "holder leaves (docs/simulator.md, kernel sharing): the replay the efficiency was fitted with";
}

std::string calibrationToYaml(const CalibrationResult& r) {
  std::string y;
  y += "# Cost-model calibration written by `tandem calibrate` (format: docs/simulator.md).\n";
  y += "# Fitted from these runs:\n";
  for (const auto& p : r.provenance) y += "#   " + p + "\n";
  y += fmt::format("# {} task samples; {} activities had task ids outside the re-planned job.\n", r.samples,
                   r.unmatched);
  if (!r.rank_speed.empty()) {
    std::string speeds;
    for (const auto& [rank, v] : r.rank_speed) speeds += fmt::format(" rank {} {:.4f}", rank, v);
    y += fmt::format("# Forward kernels' speed by rank relative to rank 0 (median over {} multi-rank runs):{}\n"
                     "# a property of the machine measured, not a key: give it as the topology's device speed.\n",
                     r.rank_speed_runs, speeds);
  }
  y += "version: 1\n";
  if (!r.calibration.gpu.empty()) {
    std::string quoted;  // a YAML double-quoted scalar
    for (char c : r.calibration.gpu) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    y += fmt::format("gpu: \"{}\"  # the GPU the runs ran on; tandem simulate warns on a topology of others\n",
                     quoted);
  }
  if (r.calibration.launch_overhead_ns) y += fmt::format("launch_overhead_ns: {}\n", *r.calibration.launch_overhead_ns);
  if (r.calibration.kernel_overlap_efficiency) {
    if (r.kernel_overlap_by_simulation)
      y += fmt::format("kernel_overlap_efficiency: {:.4f}  # throughput of kernels of two compute streams side by "
                       "side, relative to one alone: the simulated step closest to the measured one over {} one-rank "
                       "runs with the stream\n",
                       *r.calibration.kernel_overlap_efficiency, r.kernel_overlap_samples);
    else
      y += fmt::format("kernel_overlap_efficiency: {:.4f}  # throughput of kernels of two compute streams side by "
                       "side, relative to one alone (median over {} steps; 1 when none measured it)\n",
                       *r.calibration.kernel_overlap_efficiency, r.kernel_overlap_samples);
  }
  if (r.calibration.fixed_grid_guests) y += fixedGridGuestsLine() + "\n";
  // A multi-rank key's comment: how it was fitted, or where it was kept from.
  const std::string kept = r.multi_rank_source.empty() ? "" : "kept from " + r.multi_rank_source;
  auto why = [&](const std::string& fitted) { return kept.empty() ? fitted : kept; };
  if (r.calibration.multi_rank_launch_ns)
    y += fmt::format("multi_rank_launch_ns: {}  # per kernel task, added in plans of more than one rank ({})\n",
                     *r.calibration.multi_rank_launch_ns,
                     why(fmt::format("{} shapes measured both ways", r.multi_rank_launch_shapes)));
  if (r.calibration.step_overhead_ns)
    y += fmt::format("step_overhead_ns: {}  # median per (rank, step): before the first and after the last "
                     "GPU activity\n",
                     *r.calibration.step_overhead_ns);
  if (r.calibration.comm_slowdown)
    y += fmt::format("comm_slowdown: {:.4f}  # {}\n", *r.calibration.comm_slowdown,
                     why(fmt::format("least squares over {} task-steps with kernel time under a collective",
                                     r.comm_slowdown_samples)));
  if (!r.calibration.comm_slowdown_by_op.empty()) {
    y += "comm_slowdown_by_op:  # the same fit per op kind (kinds not listed take comm_slowdown)\n";
    for (const auto& [op, f] : r.calibration.comm_slowdown_by_op) {
      const auto n = r.comm_slowdown_by_op_samples.find(op);
      y += fmt::format("  {}: {:.4f}  # {}\n", toString(op), f,
                       why(fmt::format("{} task-steps", n == r.comm_slowdown_by_op_samples.end() ? 0 : n->second)));
    }
  }
  if (r.calibration.collective_start_wait)
    y += fmt::format("collective_start_wait: {:.4f}  # {}\n", *r.calibration.collective_start_wait,
                     why(fmt::format("median over {} collectives that became ready beside a kernel: their start as "
                                     "a share of its remaining time",
                                     r.collective_start_wait_samples)));
  if (!r.calibration.fp8_gemm_speedup.empty()) {
    y += "fp8_gemm_speedup:  # FP8 over BF16 speed of a GEMM by GFLOP, [gflop, speedup] (FP8 runs beside bf16 "
         "runs of the same shapes, or bench_fp8_gemm)\n";
    for (const auto& [op, points] : r.calibration.fp8_gemm_speedup) {
      std::string list;
      for (const auto& [gflop, speedup] : points)
        list += fmt::format("{}[{:.6g}, {:.4g}]", list.empty() ? "" : ", ", gflop, speedup);
      y += fmt::format("  {}: [{}]\n", toString(op), list);
    }
  }
  if (!r.calibration.fp8_writer_slowdown.empty()) {
    std::string list;
    for (const auto& [op, f] : r.calibration.fp8_writer_slowdown)
      list += fmt::format("{}{}: {:.4f}", list.empty() ? "" : ", ", toString(op), f);
    y += fmt::format("fp8_writer_slowdown: {{{}}}  # a norm or activation writing FP8 over its bf16 twin on the same "
                     "shape (FP8 runs beside bf16 runs)\n",
                     list);
  }
  if (!r.calibration.kernel_revisions.empty()) {
    std::string list;
    for (const auto& [op, rev] : r.calibration.kernel_revisions)
      list += fmt::format("{}{}: {}", list.empty() ? "" : ", ", toString(op), rev);
    y += fmt::format("kernel_revisions: {{{}}}  # the executor's kernel of each kind measured "
                     "(engine/ir/kernel_revisions.h)\n",
                     list);
  }
  y += r.ops.empty() ? "ops: {}\n" : "ops:\n";  // an empty map still parses
  for (const OpFitReport& rep : r.ops) {
    const OpCalibration& oc = r.calibration.ops.at(rep.op);
    if (rep.samples > 0)
      y += fmt::format("  {}:  # {} samples, {} shapes; fit residual median {:.2f}%, max {:.2f}%\n",
                       toString(rep.op), rep.samples, rep.shapes, rep.median_residual_pct, rep.max_residual_pct);
    else
      y += fmt::format("  {}:  # {} shapes, derived (see the header)\n", toString(rep.op), rep.shapes);
    y += fmt::format("    fit: {{base_ns: {:.1f}, ns_per_gflop: {:.4f}, ns_per_mb: {:.4f}{}}}\n", rep.base_ns,
                     rep.ns_per_gflop, rep.ns_per_mb,
                     rep.ns_per_mb_slow > 0 ? fmt::format(", ns_per_mb_slow: {:.4f}", rep.ns_per_mb_slow) : "");
    if (oc.all_shapes.blocks > 0)
      y += fmt::format("    blocks: {}  # the main kernel's thread blocks in most of its tasks (shapes not listed)\n",
                       oc.all_shapes.blocks);
    y += "    shapes:\n";
    for (const auto& [shape, e] : oc.shapes)
      y += fmt::format("      \"{}\": {{ns: {}{}{}{}{}{}}}\n", shape, e.ns,
                       e.blocks > 0 ? fmt::format(", blocks: {}", e.blocks) : "",
                       e.threads > 0 ? fmt::format(", threads: {}, regs: {}, smem: {}, cluster: {}", e.threads,
                                                   e.registers, e.shared_bytes, e.cluster)
                                     : "",
                       e.tile ? fmt::format(", tile: {}x{}", e.tile->m, e.tile->n) : "",
                       e.gflop >= 0 && e.mb >= 0 ? fmt::format(", gflop: {:.6g}, mb: {:.6g}", e.gflop, e.mb) : "",
                       e.origin == ShapeOrigin::Sweep  ? ", from: sweep"
                       : e.origin == ShapeOrigin::Runs ? ", from: runs"
                                                       : "");
  }
  for (OpKind op : r.fused_ops)
    y += fmt::format("  {}:  # planned but never measured: the executor fuses it into another task\n    ns: 0\n",
                     toString(op));
  if (!r.collective_beside.empty()) {
    y += "collective_beside:  # factor on a collective's time by the task role of the kernels beside it the longest\n";
    for (const CollectiveBesideReport& b : r.collective_beside)
      y += fmt::format("  \"{}\": {:.4f}  # {}\n", b.role, b.factor,
                       why(fmt::format("median of {} collectives against the size model", b.samples)));
  }
  if (!r.collectives.empty()) {
    y += "collectives:\n";
    for (const CollectiveFitReport& c : r.collectives) {
      std::string sizes;
      for (const auto& [bytes, gbps] : c.sizes)
        sizes += fmt::format("{}[{:.0f}, {:.3f}]", sizes.empty() ? "" : ", ", bytes, gbps);
      y += fmt::format("  - {{op: {}, ranks: {}, latency_ns: {}, gbps: {:.3f}{}}}  # {}\n", toString(c.op), c.ranks,
                       c.latency_ns, c.gbps, sizes.empty() ? "" : ", sizes: [" + sizes + "]",
                       why(fmt::format("{} samples, max residual {:.2f}% of the line", c.samples, c.max_residual_pct)));
    }
  }
  return y;
}

// FP8 GEMMs whose shapes the runs also measured in bf16 (an FP8 run
// calibrated with a bf16 run of the same job): how much faster they ran in
// those steps, per GEMM kind by GFLOP (Calibration::fp8_gemm_speedup), for
// the FP8 GEMMs of shapes no run measured. In a step the memory-bound
// kernels between GEMMs leave them power, so this is the speed-up of a
// training step, where bench_fp8_gemm's (the cost model's default) is that
// of GEMMs back to back at the power limit (on one H100 1.65-1.67x, against
// 1.7-2.1x in a 1.1B Llama's steps; docs/accuracy.md). Shapes whose FP8 GEMM
// transposed an operand itself (fp8t) are left out: the model adds those
// transposes apart. Shapes of equal work (to 6 digits) share a point, the
// median of their speed-ups.
void deriveFp8Speedup(CalibrationResult& out) {
  for (OpKind op : {OpKind::Matmul, OpKind::MatmulBwdData, OpKind::MatmulBwdWeight}) {
    const auto oc = out.calibration.ops.find(op);
    if (oc == out.calibration.ops.end()) continue;
    std::map<double, std::vector<double>> by_gflop;
    for (const auto& [shape, e] : oc->second.shapes) {
      if (!isFp8ShapeKey(shape) || e.ns <= 0 || e.gflop <= 0) continue;
      std::string bf16;
      bool transposes = false;
      for (const auto& [k, v] : parseShapeKey(shape)) {
        if (k == "fp8t") transposes = transposes || v != "0";
        if (k == "fp8" || k == "fp8t") continue;
        bf16 += (bf16.empty() ? "" : " ") + k + "=" + v;
      }
      const auto plain = oc->second.shapes.find(bf16);
      if (transposes || plain == oc->second.shapes.end() || plain->second.ns <= 0) continue;
      // A GEMM's speed-up: not from tasks that summed a bias gradient too
      // (in FP8 from the codes, another kernel than bf16's).
      if (out.with_bias_gradient.count({op, shape}) || out.with_bias_gradient.count({op, bf16})) continue;
      // A pair whose times say FP8 ran at half the speed or at four times
      // (FP8's peak is twice bf16's) measured something else: left out.
      const double speedup = double(plain->second.ns) / double(e.ns);
      if (speedup < 0.5 || speedup > 4) continue;
      by_gflop[std::stod(fmt::format("{:.6g}", e.gflop))].push_back(speedup);
    }
    if (by_gflop.empty()) continue;
    std::vector<std::pair<double, double>> points;
    for (const auto& [gflop, speedups] : by_gflop) points.push_back({gflop, median(speedups)});
    out.calibration.fp8_gemm_speedup[op] = std::move(points);
  }
}

// A norm or activation writing FP8 under delayed scaling (shape keys with
// "fp8out") measured beside its bf16 twin (the same key without it) in
// the same calibration: per op kind, the median of the FP8 kernel's time
// over the twin's (Calibration::fp8_writer_slowdown). The shapes the runs
// did not share then take their twin's time times it.
void deriveFp8WriterSlowdown(CalibrationResult& out) {
  for (const auto& [op, oc] : out.calibration.ops) {
    std::vector<double> ratios;
    for (const auto& [shape, e] : oc.shapes) {
      if (shape.find("fp8out=") == std::string::npos || e.ns <= 0) continue;
      std::string bf16;
      for (const auto& [k, v] : parseShapeKey(shape))
        if (k != "fp8out") bf16 += (bf16.empty() ? "" : " ") + k + "=" + v;
      const auto plain = oc.shapes.find(bf16);
      if (plain == oc.shapes.end() || plain->second.ns <= 0) continue;
      // Beyond 4x either way the pair measured something else.
      const double ratio = double(e.ns) / double(plain->second.ns);
      if (ratio > 0.25 && ratio < 4) ratios.push_back(ratio);
    }
    if (!ratios.empty()) out.calibration.fp8_writer_slowdown[op] = median(ratios);
  }
}

}  // namespace tandem::sim
