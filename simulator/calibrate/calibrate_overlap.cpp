#include "simulator/calibrate/calibrate_overlap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan_trace/plan_facts.h"
#include "simulator/replay/replay.h"
#include "traces/store/trace_reader.h"

namespace tandem::sim {
namespace {

struct MeasuredRun {
  Plan plan;
  double step_ns = 0;  // median over rank 0's steps
};

bool hasSecondComputeStream(const Plan& plan) {
  if (plan.world_size != 1 || plan.programs.empty()) return false;
  const auto& streams = plan.programs[0].streams;
  return std::count_if(streams.begin(), streams.end(),
                       [](const StreamInfo& s) { return s.kind == StreamKind::Compute; }) > 1;
}

std::vector<MeasuredRun> qualifyingRuns(const std::vector<CalibrationInput>& inputs) {
  std::vector<MeasuredRun> out;
  for (const CalibrationInput& in : inputs) {
    traces::TraceReader reader(in.path);
    std::vector<int64_t> runs;
    if (in.run >= 0) {
      runs.push_back(in.run);
    } else {
      for (const auto& r : reader.runs())
        if (r.kind == traces::RunKind::Real) runs.push_back(r.id);
    }
    for (int64_t run : runs) {
      const traces::RunInfo info = reader.run(run);
      if (info.job_yaml.empty() && info.plan_format == 0) continue;
      Plan plan = plan_trace::planOfRun(reader, run);
      if (!hasSecondComputeStream(plan)) continue;
      std::vector<double> steps;
      for (const auto& st : reader.steps(run))
        if (st.rank == 0 && st.end_ns > st.start_ns) steps.push_back(double(st.end_ns - st.start_ns));
      if (steps.empty()) continue;
      std::sort(steps.begin(), steps.end());
      const size_t n = steps.size();
      out.push_back({std::move(plan), n % 2 ? steps[n / 2] : 0.5 * (steps[n / 2 - 1] + steps[n / 2])});
    }
  }
  return out;
}

}  // namespace

std::optional<OverlapRefit> refitOverlapBySimulation(CalibrationResult& cal,
                                                     const std::vector<CalibrationInput>& inputs,
                                                     const Topology& topology) {
  const std::vector<MeasuredRun> runs = qualifyingRuns(inputs);
  if (runs.empty()) return std::nullopt;
  SimOptions options;
  options.collective_calibration = cal.calibration.collectives;
  auto meanError = [&](double e) {
    Calibration c = cal.calibration;
    c.kernel_overlap_efficiency = e;
    const RooflineCostModel model(RooflineParams::defaults(), c);
    double sum = 0;
    for (const MeasuredRun& r : runs)
      sum += std::fabs(double(simulatePlan(r.plan, topology, model, options).step_ns) - r.step_ns) / r.step_ns;
    return 100.0 * sum / double(runs.size());
  };
  OverlapRefit best;
  best.runs = int(runs.size());
  best.from_timelines = cal.calibration.kernel_overlap_efficiency.value_or(1.0);
  best.mean_abs_error_pct = 1e300;
  auto scan = [&](double lo, double hi, double step) {
    for (double e = lo; e <= hi + 1e-9; e += step) {
      const double err = meanError(e);
      if (err < best.mean_abs_error_pct) best.mean_abs_error_pct = err, best.efficiency = e;
    }
  };
  scan(0.8, 1.6, 0.05);
  const double centre = best.efficiency;
  scan(std::max(0.8, centre - 0.05), std::min(1.6, centre + 0.05), 0.005);
  cal.calibration.kernel_overlap_efficiency = best.efficiency;
  cal.kernel_overlap_samples = best.runs;
  cal.kernel_overlap_by_simulation = true;
  return best;
}

}  // namespace tandem::sim
