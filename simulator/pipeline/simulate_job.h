#pragma once
// Plan -> simulate -> trace, the one way it happens. `tandem simulate`,
// `tandem demo`, the GUI's what-if and recompute views and the benchmarks
// call simulateJob; none of them assembles the steps itself, so a setting
// one of them offers, all of them do (docs/architecture.md).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory/memory_fit.h"
#include "engine/plan/plan.h"
#include "simulator/cost/cost_model.h"
#include "simulator/network/nccl_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// How to simulate: `tandem simulate`'s flags, one field each.
struct SimulateSettings {
  std::string topology = "dgx-h200";  // preset name or topology file
  // The topology itself (YAML, docs/topology-format.md), as a run stored it:
  // when set, `topology` only names it.
  std::string topology_yaml;
  // Calibration (docs/simulator.md) replacing the roofline defaults: the name
  // of one that comes with tandem or a file; "auto" (kShippedCalibration):
  // the profile shipped for the topology's GPU, the defaults with a warning
  // where none is (the default, as `tandem simulate`'s); empty or "none":
  // the defaults.
  std::string calibration = "auto";
  SymmetryMode symmetry = SymmetryMode::Auto;
  std::optional<Algorithm> algorithm;  // forced collective algorithm (ring, tree, nvls)
  std::optional<Protocol> protocol;    // forced protocol (ll, ll128, simple)
  bool nvls = false;                   // allow NVLink SHARP on NVSwitch machines
  bool inter_host_tree = true;         // allow tree all-reduce across hosts (NCCL's default)
  bool tree_flows = false;             // simulate trees across hosts flow by flow, not in closed form
  int64_t call_floor_ns = -1;          // shortest collective call; -1: the model's default
  std::optional<KernelSharing> kernel_sharing;  // empty: the calibration's
};

// The settings' spellings, as the command line and the GUI take them. Each
// throws std::invalid_argument naming the flag and the allowed values.
SymmetryMode parseSymmetrySetting(const std::string& s);           // auto, on, off
std::optional<Algorithm> parseAlgorithmSetting(const std::string& s);  // "" (model's choice), ring, tree, nvls
std::optional<Protocol> parseProtocolSetting(const std::string& s);    // "" (model's choice), ll, ll128, simple
std::optional<KernelSharing> parseKernelSharingSetting(const std::string& s);  // "" (calibration's), first_holds, fair

struct SimulateRequest {
  JobSpec job;
  // The job's plan when the caller has it already (it is then not planned
  // again); must be buildPlan(job).
  std::optional<Plan> plan;
  SimulateSettings settings;
  // Trace file the run is appended to (written whole or not at all); empty:
  // no trace. With fresh_out the file is replaced instead.
  std::string out_path;
  bool fresh_out = false;
  std::string run_name;  // default: the job's name + " (simulated)"
  // When the plan does not fit its GPUs, look for the recompute, micro-batch
  // and LM head choices that would (fitting_choices); a sweep only needs the
  // verdict and leaves this off (each choice is planned again).
  bool suggest_fitting_choices = true;
  // Say where the kernel time comes from and how well the calibration reads
  // what it interpolates (SimulateOutcome::kernel_time_sources; about 10 ms
  // of leave-one-out reading per simulation); a sweep leaves it off.
  bool describe_kernel_times = true;
};

struct SimulateOutcome {
  Plan plan;
  Topology topology;
  SimResult result;
  std::vector<SimRankSummary> ranks;  // summarizeRanks(result)
  // What the user should know about the result, in the order found: a
  // calibration of another GPU or of other shapes, a plan too large for the
  // topology's GPUs. Each also reached on_warning as it was found.
  std::vector<std::string> warnings;
  // Whether every rank's plan fits its GPU's memory as `tandem run` counts
  // it (memory_fit_warning.h); when not, the choices that would.
  bool fits_memory = true;
  std::vector<FittingChoice> fitting_choices;
  int64_t run_id = -1;  // in out_path
  // The kernel times' source in words: a calibration's file name (and
  // "shipped for H200" where "auto" chose it), or "roofline defaults".
  std::string calibration_used;
  // Where the kernel time comes from (measured shapes, read off
  // neighbours and how well, fits, roofline); empty without a calibration.
  std::string kernel_time_sources;
};

struct SimulateCallbacks {
  // (percent, stage) between stages, on the calling thread.
  std::function<void(int, const std::string&)> progress;
  // Each warning as soon as it is known (a calibration's before the long
  // simulation starts).
  std::function<void(const std::string&)> on_warning;
};

// Throws SpecError, TopologyError, CalibrationError, SimulationError,
// std::invalid_argument or TraceError with a readable message.
SimulateOutcome simulateJob(const SimulateRequest& request, const SimulateCallbacks& callbacks = {});

}  // namespace tandem::sim
