#pragma once
// What-if: re-plan a run's job with changed settings, simulate one step and
// append the result to a trace file as a new simulated run. A thin adapter
// over the one plan -> simulate -> trace pipeline (simulator/pipeline/
// simulate_job.h), so the GUI offers every setting `tandem simulate` has.
// The GUI runs this on a worker thread; tests call it directly. Qt-free.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/memory/memory_fit.h"
#include "engine/plan/plan.h"
#include "simulator/pipeline/simulate_job.h"

namespace tandem::gui {

struct WhatIfRequest {
  std::string job_yaml;                 // the base job; empty: the built-in GPT-2 124M, data parallel 8
  std::string job_source = "<run>";     // named in spec errors
  std::vector<std::string> overrides;   // "recompute.policy=full", "training.micro_batch=8", ...
  // Topology, calibration and the simulator's options, as `tandem simulate` takes them.
  sim::SimulateSettings settings;
  std::string out_path;                 // trace file the run is appended to
  std::string run_name;                 // default: the job's name + " (what-if)"
};

struct WhatIfResult {
  int64_t run_id = -1;
  int64_t step_ns = 0;
  int64_t peak_memory_bytes = 0;  // highest over ranks, from the simulation
  int64_t recompute_ns = 0;       // recompute time on rank 0
  int64_t exposed_comm_ns = 0;    // on rank 0
  std::vector<RecomputeDecision> recompute;
  // What the user should know about the result: a calibration measured on
  // another GPU than the topology's (simulator/cost/calibration_device.h), shapes
  // it did not measure, a plan that would not fit the topology's GPUs.
  std::vector<std::string> warnings;
  // Where the kernel time comes from and how well the calibration reads
  // what it interpolates (sim::SimulateOutcome::kernel_time_sources); empty
  // without a calibration.
  std::string kernel_time_sources;
  // When it would not fit: the recompute, micro-batch and LM-head choices
  // that would (simulator/replay/memory_fit_warning.h), and the job they apply to.
  std::vector<FittingChoice> fitting_choices;
  JobSpec job;
};

// progress(percent, stage) is called from the calling thread between stages.
// Throws SpecError, TopologyError, CalibrationError, SimulationError,
// std::invalid_argument or TraceError with a readable message.
WhatIfResult runWhatIf(const WhatIfRequest& request,
                       const std::function<void(int, const std::string&)>& progress = {});

}  // namespace tandem::gui
