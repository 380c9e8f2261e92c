#include "simulator/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "engine/planner.h"
#include "traces/compare.h"

namespace tandem::sim {
namespace {

struct Sample {
  double gflop = 0, mb = 0, ns = 0;
  std::string shape;
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
bool solveWeighted(const std::vector<Sample>& s, const std::array<bool, 3>& use, std::array<double, 3>& coef) {
  std::vector<int> cols;
  for (int c = 0; c < 3; ++c)
    if (use[c]) cols.push_back(c);
  const size_t k = cols.size();
  double A[3][4] = {};
  for (const Sample& x : s) {
    const double w = 1.0 / std::max(x.ns * x.ns, 1.0);
    const double f[3] = {1.0, x.gflop, x.mb};
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; j < k; ++j) A[i][j] += w * f[cols[i]] * f[cols[j]];
      A[i][3] += w * f[cols[i]] * x.ns;
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
      for (size_t c = i; c < 4; ++c) A[r][c] -= f * A[i][c];
    }
  }
  coef = {0, 0, 0};
  for (size_t i = 0; i < k; ++i) coef[cols[i]] = A[i][3] / A[i][i];
  return true;
}

double relativeResidualPct(const Sample& x, const std::array<double, 3>& c) {
  const double pred = c[0] + c[1] * x.gflop + c[2] * x.mb;
  return 100.0 * std::fabs(pred - x.ns) / std::max(x.ns, 1.0);
}

// With three or more distinct shapes: the best non-negative fit among
// base+a+b, base+a, base+b and base (the simplest within 1% of the best).
// With fewer, a base cannot be told from a slope, so one proportional term
// is fitted, chosen by arithmetic intensity like a roofline: FLOP-bound
// above 100 FLOP per byte (H100/H200 balance is about 200), bytes-bound below.
OpFitReport fitOp(OpKind op, const std::vector<Sample>& s) {
  static constexpr std::array<std::array<bool, 3>, 4> kModels{
      {{true, false, false}, {true, true, false}, {true, false, true}, {true, true, true}}};
  OpFitReport best;
  best.op = op;
  best.samples = int64_t(s.size());
  std::map<std::string, int> shapes;
  for (const Sample& x : s) shapes[x.shape]++;
  std::array<double, 3> chosen{};
  if (shapes.size() >= 3) {
    std::vector<std::pair<double, std::array<double, 3>>> fits;  // (error, coefficients), simplest first
    for (const auto& use : kModels) {
      std::array<double, 3> c{};
      if (!solveWeighted(s, use, c) || c[0] < 0 || c[1] < 0 || c[2] < 0) continue;
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
  best.shapes = int64_t(shapes.size());
  std::vector<double> res;
  for (const Sample& x : s) res.push_back(relativeResidualPct(x, chosen));
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

// Median gap between back-to-back activities of a stream: the launch cost a
// simulated kernel pays on top of its measured duration. Gaps over 50 us are
// waits (on another stream or the host), not launch gaps.
int64_t medianLaunchGap(traces::TraceReader& reader, int64_t run) {
  std::vector<double> gaps;
  int rank = -1, stream = -1;
  int64_t last_end = 0;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.kind == traces::ActivityKind::Host) return;
    if (a.rank == rank && a.stream == stream) {
      const int64_t gap = a.start_ns - last_end;
      if (gap >= 0 && gap < 50000) gaps.push_back(double(gap));
      last_end = std::max(last_end, a.end_ns);
    } else {
      rank = a.rank;
      stream = a.stream;
      last_end = a.end_ns;
    }
  });
  return int64_t(std::llround(median(gaps)));
}

}  // namespace

CalibrationResult calibrateFromRuns(const std::vector<CalibrationInput>& inputs) {
  CalibrationResult out;
  std::map<OpKind, std::vector<Sample>> samples;
  std::map<std::pair<CollectiveOp, int>, std::vector<CollSample>> coll;
  std::vector<double> launch_gaps;

  for (const CalibrationInput& in : inputs) {
    traces::TraceReader reader(in.path);
    std::vector<int64_t> runs;
    if (in.run >= 0) {
      runs.push_back(reader.run(in.run).id);
    } else {
      for (const auto& r : reader.runs())
        if (r.kind == traces::RunKind::Real) runs.push_back(r.id);
      if (runs.empty()) throw std::runtime_error(fmt::format("{}: no real run to calibrate from (pick one with FILE:RUN)", in.path));
    }
    for (int64_t run : runs) {
      const traces::RunInfo info = reader.run(run);
      if (info.job_yaml.empty())
        throw std::runtime_error(fmt::format("{}: run {} carries no job, so its tasks cannot be re-planned", in.path, run));
      const Plan plan = buildPlan(parseJob(info.job_yaml, fmt::format("{} run {}", in.path, run)));
      const auto times = traces::taskTimesPerStep(reader, run);
      if (times.empty())
        throw std::runtime_error(fmt::format("{}: run {} has no activities with plan task ids", in.path, run));
      const int64_t gap = medianLaunchGap(reader, run);
      launch_gaps.push_back(double(gap));
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
        ++out.samples;
        if (task.collective) {
          int n = 1;
          for (const auto& g : plan.groups)
            if (g.name == task.collective->group) n = int(g.ranks.size());
          coll[{task.collective->op, n}].push_back(
              {busFactor(task.collective->op, n) * double(task.collective->bytes), t.ns});
          continue;
        }
        // Kernels of one task run back to back: each launch costs the gap.
        samples[task.op].push_back({task.flops / 1e9, double(task.bytes_read + task.bytes_written) / 1e6,
                                    t.ns + double(gap) * double(std::max<int64_t>(1, t.activities)), shapeKey(task)});
      }
      // The file name only: provenance must not leak the machine's folders.
      out.provenance.push_back(fmt::format("{} run {} \"{}\" ({}; host {}; {}; devices {})",
                                           std::filesystem::path(in.path).filename().string(), run, info.name,
                                           traces::toString(info.kind), info.host, info.tool_version,
                                           info.devices_json.empty() ? "unknown" : info.devices_json));
    }
  }

  out.calibration.source = "tandem calibrate";
  if (!launch_gaps.empty()) out.calibration.launch_overhead_ns = int64_t(std::llround(median(launch_gaps)));
  for (auto& [op, s] : samples) {
    OpFitReport rep = fitOp(op, s);
    OpCalibration& oc = out.calibration.ops[op];
    oc.all_shapes.has_fit = true;
    oc.all_shapes.base_ns = rep.base_ns;
    oc.all_shapes.ns_per_gflop = rep.ns_per_gflop;
    oc.all_shapes.ns_per_mb = rep.ns_per_mb;
    std::map<std::string, std::vector<double>> by_shape;
    for (const Sample& x : s) by_shape[x.shape].push_back(x.ns);
    for (const auto& [shape, ns] : by_shape) {
      CostEntry e;
      e.ns = int64_t(std::llround(median(ns)));
      oc.shapes[shape] = e;
    }
    out.ops.push_back(rep);
  }
  for (auto& [key, s] : coll) {
    CollectiveFitReport rep;
    rep.op = key.first;
    rep.ranks = key.second;
    rep.samples = int64_t(s.size());
    // ns = latency + bus_bytes / gbps: a line through the samples (ordinary
    // least squares; with a single size, all time is bandwidth time).
    std::vector<Sample> pts;
    for (const auto& c : s) pts.push_back({c.bus_bytes / 1e9, 0, c.ns, ""});
    std::array<double, 3> c{};
    if (!(solveWeighted(pts, {true, true, false}, c) && c[0] >= 0 && c[1] > 0)) {
      c = {0, 0, 0};
      solveWeighted(pts, {false, true, false}, c);
    }
    rep.latency_ns = int64_t(std::llround(c[0]));
    // c[1] is ns per bus GB, so the bandwidth in GB/s is 1e9 / c[1].
    rep.gbps = c[1] > 0 ? 1e9 / c[1] : 0;
    for (const Sample& p : pts) rep.max_residual_pct = std::max(rep.max_residual_pct, relativeResidualPct(p, c));
    if (rep.gbps > 0) out.calibration.collectives.push_back({rep.op, rep.ranks, rep.latency_ns, rep.gbps});
    out.collectives.push_back(rep);
  }
  return out;
}

std::string calibrationToYaml(const CalibrationResult& r) {
  std::string y;
  y += "# Cost-model calibration written by `tandem calibrate` (format: docs/simulator.md).\n";
  y += "# Fitted from these runs:\n";
  for (const auto& p : r.provenance) y += "#   " + p + "\n";
  y += fmt::format("# {} task samples; {} activities had task ids outside the re-planned job.\n", r.samples, r.unmatched);
  y += "version: 1\n";
  if (r.calibration.launch_overhead_ns) y += fmt::format("launch_overhead_ns: {}\n", *r.calibration.launch_overhead_ns);
  y += "ops:\n";
  for (const OpFitReport& rep : r.ops) {
    const OpCalibration& oc = r.calibration.ops.at(rep.op);
    y += fmt::format("  {}:  # {} samples, {} shapes; fit residual median {:.2f}%, max {:.2f}%\n", toString(rep.op),
                     rep.samples, rep.shapes, rep.median_residual_pct, rep.max_residual_pct);
    y += fmt::format("    fit: {{base_ns: {:.1f}, ns_per_gflop: {:.4f}, ns_per_mb: {:.4f}}}\n", rep.base_ns,
                     rep.ns_per_gflop, rep.ns_per_mb);
    y += "    shapes:\n";
    for (const auto& [shape, e] : oc.shapes) y += fmt::format("      \"{}\": {{ns: {}}}\n", shape, e.ns);
  }
  if (!r.collectives.empty()) {
    y += "collectives:\n";
    for (const CollectiveFitReport& c : r.collectives)
      y += fmt::format("  - {{op: {}, ranks: {}, latency_ns: {}, gbps: {:.3f}}}  # {} samples, max residual {:.2f}%\n",
                       toString(c.op), c.ranks, c.latency_ns, c.gbps, c.samples, c.max_residual_pct);
  }
  return y;
}

}  // namespace tandem::sim
