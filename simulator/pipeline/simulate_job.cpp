#include "simulator/pipeline/simulate_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "engine/plan/planner.h"
#include "engine/spec/resources.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/calibration_warnings.h"
#include "simulator/pipeline/trace_output.h"
#include "simulator/replay/memory_fit_warning.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_writer.h"

namespace tandem::sim {

SymmetryMode parseSymmetrySetting(const std::string& s) {
  if (s == "auto") return SymmetryMode::Auto;
  if (s == "on") return SymmetryMode::On;
  if (s == "off") return SymmetryMode::Off;
  throw std::invalid_argument("--symmetric " + s + " (allowed: auto, on, off)");
}

std::optional<Algorithm> parseAlgorithmSetting(const std::string& s) {
  if (s.empty()) return std::nullopt;
  const std::optional<Algorithm> a = parseAlgorithm(s);
  if (!a || *a == Algorithm::Direct) throw std::invalid_argument("--algorithm " + s + " (allowed: ring, tree, nvls)");
  return a;
}

std::optional<Protocol> parseProtocolSetting(const std::string& s) {
  if (s.empty()) return std::nullopt;
  const std::optional<Protocol> p = parseProtocol(s);
  if (!p) throw std::invalid_argument("--protocol " + s + " (allowed: ll, ll128, simple)");
  return p;
}

std::optional<KernelSharing> parseKernelSharingSetting(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s == "first_holds") return KernelSharing::FirstHolds;
  if (s == "fair") return KernelSharing::Fair;
  throw std::invalid_argument("--kernel-sharing " + s + " (allowed: first_holds, fair)");
}

namespace {

SimOptions simOptions(const SimulateSettings& s, const Calibration& cal) {
  SimOptions so;
  so.symmetry = s.symmetry;
  so.nccl.force_algorithm = s.algorithm;
  so.nccl.force_protocol = s.protocol;
  so.nccl.allow_nvls = s.nvls;
  so.nccl.inter_host_tree = s.inter_host_tree;
  so.nccl.tree_flows = s.tree_flows;
  if (s.call_floor_ns >= 0) so.nccl.call_floor_ns = s.call_floor_ns;
  so.collective_calibration = cal.collectives;
  return so;
}

// Appends (or, fresh, writes) the run; the file is replaced only when the
// whole run has been written.
int64_t writeRun(const SimulateRequest& request, const SimulateOutcome& out,
                 const std::vector<traces::StatRow>& stats) {
  traces::AtomicOutput output(request.out_path, /*copy_existing=*/!request.fresh_out);
  int64_t run = -1;
  {
    traces::TraceWriter writer(output.tempPath());
    SimTraceOptions options;
    options.run_name = request.run_name;
    options.stats = stats;
    run = writeSimulationTrace(writer, out.plan, out.topology, out.result, options);
  }
  output.commit();
  return run;
}

}  // namespace

SimulateOutcome simulateJob(const SimulateRequest& request, const SimulateCallbacks& callbacks) {
  auto progress = [&](int pct, const std::string& stage) {
    if (callbacks.progress) callbacks.progress(pct, stage);
  };
  SimulateOutcome out;
  std::vector<traces::StatRow> stats;
  auto warn = [&](const std::string& line) {
    out.warnings.push_back(line);
    if (callbacks.on_warning) callbacks.on_warning(line);
  };
  const SimulateSettings& s = request.settings;
  progress(5, "planning " + request.job.name);
  out.plan = request.plan ? *request.plan : buildPlan(request.job);
  progress(30, "loading topology " + s.topology);
  out.topology = s.topology_yaml.empty() ? loadTopology(resourcePath(s.topology))
                                         : parseTopologyYaml(s.topology_yaml, "<topology of " + s.topology + ">");
  progress(35, "loading calibration " + s.calibration);
  ResolvedCalibration resolved = resolveCalibration(s.calibration, out.topology);
  if (resolved.warning) warn(*resolved.warning);
  Calibration cal = std::move(resolved.calibration);
  out.calibration_used = resolved.used;
  if (s.kernel_sharing) cal.kernel_sharing = s.kernel_sharing;
  const RooflineCostModel cost(RooflineParams::defaults(), cal);
  // Said before the simulation: a calibration of another GPU, or one that
  // did not measure some of the plan's shapes, still runs (what-if studies
  // may want it).
  CalibrationWarnings cal_warnings =
      calibrationWarnings(out.plan, out.topology, cal, cost, request.describe_kernel_times);
  for (const std::string& w : cal_warnings.lines) warn(w);
  stats = cal_warnings.stats;
  out.kernel_time_sources = cal_warnings.kernel_time_sources.value_or("");
  progress(40, "simulating one step");
  out.result = simulatePlan(out.plan, out.topology, cost, simOptions(s, cal));
  // A plan larger than the topology's GPUs: the step is still reported, with
  // what a real run would say.
  if (std::optional<MemoryFitWarning> memory = memoryFitWarning(out.plan, out.topology, out.result, request.suggest_fitting_choices)) {
    warn(memory->line);
    stats.push_back(memory->stat);
    out.fits_memory = false;
    out.fitting_choices = std::move(memory->choices);
  }
  out.ranks = summarizeRanks(out.result);
  if (!request.out_path.empty()) {
    progress(80, "writing the run");
    out.run_id = writeRun(request, out, stats);
  }
  progress(100, "done");
  return out;
}

}  // namespace tandem::sim
