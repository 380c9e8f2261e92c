#pragma once
// The part of `tandem calibrate` that measures collectives beside the
// compute kernels of real runs (calibrate.cpp fits everything else): how
// long NCCL's kernel waits for the SMs once its inputs are ready
// (Calibration::collective_start_wait), and which kernels share the GPU
// with each collective (Calibration::collective_beside).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/calibrate/calibrate.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

namespace tandem::sim {

// One pass over a run: its compute kernels per rank (by start) and its
// collectives, what both measurements below read.
struct RunKernelsAndCollectives {
  struct Kernel {
    int64_t start, end, task;
  };
  std::map<int, std::vector<Kernel>> kernels;
  std::vector<traces::CollectiveRow> collectives;
};
RunKernelsAndCollectives readKernelsAndCollectives(traces::TraceReader& reader, int64_t run, const Plan& plan);

// For each collective row: when its transfer began, the latest start of
// the same collective on the ranks of its group (rows of the same task and
// group whose intervals overlap it). A rank that arrives first spins in
// NCCL's kernel until the last one arrives; kernels beside it then are not
// beside communication, and fits that treat them so see no slowdown.
std::vector<int64_t> transferStarts(const std::vector<traces::CollectiveRow>& rows);

// For each (rank, collective task): the task role (taskRole) of the compute
// kernels beside the collective's transfer the longest on that rank, the
// most frequent over its steps; "" when none ran. The simulator picks the
// role the same way (Replay::dominantRoleBeside).
std::map<traces::TaskKey, std::string> rolesBesideCollectives(const RunKernelsAndCollectives& run,
                                                              const Plan& plan);

// For each collective of a multi-rank run whose inputs became ready while a
// compute kernel ran: its start after that moment, as a share of the
// kernel's remaining time.
std::vector<double> collectiveStartWaits(const RunKernelsAndCollectives& run, const Plan& plan);

// Factors from the measured / size-model ratios of each neighbouring role
// (their median), scaled so that the smallest is 1; the size model's
// time is to be multiplied by model_scale (<= 1) so that every product
// stays. Roles never seen get the size model's own factor, (other), written
// only when it is not 1.
struct BesideFit {
  std::vector<CollectiveBesideReport> reports;
  double model_scale = 1;
};
struct RoleRatio {
  double median = 1;  // of measured / size-model time
  int64_t samples = 0;
};
BesideFit fitCollectiveBeside(const std::map<std::string, RoleRatio>& ratios);

}  // namespace tandem::sim
