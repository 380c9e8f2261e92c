#include "gui/what_if.h"

#include <algorithm>

#include "engine/spec/job.h"
#include "engine/plan/planner.h"
#include "simulator/cost/calibration_warnings.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/replay/memory_fit_warning.h"
#include "simulator/pipeline/trace_output.h"
#include "simulator/topology/topology_presets.h"
#include "traces/store/trace_writer.h"

namespace tandem::gui {

namespace {

JobSpec jobFor(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  if (yaml.empty()) {
    if (overrides.empty()) return defaultJob();
    return parseJob(jobToYaml(defaultJob()), "<built-in gpt2-124m-dp8>", overrides);
  }
  return parseJob(yaml, source, overrides);
}

}  // namespace

Plan planFor(const std::string& job_yaml, const std::vector<std::string>& overrides) {
  return buildPlan(jobFor(job_yaml, "<run>", overrides));
}

WhatIfResult runWhatIf(const WhatIfRequest& request, const std::function<void(int, const std::string&)>& progress) {
  auto report = [&](int pct, const std::string& stage) {
    if (progress) progress(pct, stage);
  };
  report(5, "planning");
  const JobSpec job = jobFor(request.job_yaml, request.job_source, request.overrides);
  const Plan plan = buildPlan(job);
  report(30, "loading topology " + request.topology);
  const sim::Topology topo = sim::loadTopology(request.topology);
  WhatIfResult out;
  sim::Calibration cal;
  if (!request.calibration.empty()) {
    report(35, "loading calibration " + request.calibration);
    cal = sim::loadCalibration(request.calibration);
  }
  report(40, "simulating one step");
  // As `tandem simulate` does with the same file: the cost model's keys and
  // the calibrated collectives.
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), cal);
  sim::CalibrationWarnings warnings = sim::calibrationWarnings(plan, topo, cal, cost);
  sim::SimOptions sim_options;
  sim_options.collective_calibration = cal.collectives;
  const sim::SimResult result = sim::simulatePlan(plan, topo, cost, sim_options);
  if (auto memory = sim::memoryFitWarning(plan, topo, result)) {
    warnings.lines.push_back(memory->line);
    warnings.stats.push_back(memory->stat);
    out.fitting_choices = std::move(memory->choices);
  }
  out.job = job;
  out.warnings = warnings.lines;
  report(80, "writing the run");
  {
    traces::TraceWriter writer(request.out_path);
    sim::SimTraceOptions options;
    options.topology_label = request.topology;
    options.run_name = request.run_name.empty() ? job.name + " (what-if)" : request.run_name;
    options.stats = warnings.stats;
    out.run_id = sim::writeSimulationTrace(writer, plan, topo, result, options);
    writer.flush();
  }
  out.step_ns = result.step_ns;
  for (const auto& r : result.ranks) out.peak_memory_bytes = std::max(out.peak_memory_bytes, r.peak_memory_bytes);
  const auto summary = sim::summarizeRank(result, 0);
  out.recompute_ns = summary.recompute_ns;
  out.exposed_comm_ns = summary.exposed_comm_ns;
  out.recompute = plan.recompute;
  report(100, "done");
  return out;
}

}  // namespace tandem::gui
