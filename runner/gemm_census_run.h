#pragma once
// Runs the GEMM census (simulator/calibrate/gemm_census.h) on this process's
// GPU: each problem once through the executor's own GEMM path (cuda::Gemm,
// its algorithm tuning on, as a run's first step has it), then once more
// inside a profiled step as a plan task named by the problem, so that the
// trace records the kernel cuBLASLt gave the executor with its launch
// geometry. Times are not the point: each shape runs once, on a cool GPU;
// the sweep times kernels at the power limit. The tuning shares the
// executor's choice cache on disk (engine/cuda/gemm_choice_cache.h): a
// shape a run on this machine already tuned keeps that run's choice, and
// runs after the census take the census's.

#include <functional>
#include <string>
#include <vector>

#include "engine/ir/gemm_problem.h"

namespace tandem::runner {

struct GemmCensusRunOptions {
  std::string trace_path;  // written afresh
  std::string run_name;    // the trace's run name (sim::kGemmCensusRunName)
  int device = 0;
  double time_limit_s = 0;  // > 0: tune no problem after this many seconds (the rest left out)
  // Called now and then while tuning: problems tuned so far, of all, and seconds since the start.
  std::function<void(int done, int total, double seconds)> progress;
};

struct GemmCensusRunSummary {
  int recorded = 0;      // problems run in the profiled step
  int unsupported = 0;   // problems cuBLASLt offers the executor no algorithm for (a fused epilogue)
  int left_out = 0;      // not tuned before the time limit
  double seconds = 0;
  std::string gpu;       // the device's name
  std::string profile;   // the profiler's attribution line
};

// Throws std::runtime_error when this tandem has no profiler or no GPU
// answers.
GemmCensusRunSummary runGemmCensus(const std::vector<GemmProblem>& problems, const GemmCensusRunOptions& options);

}  // namespace tandem::runner
