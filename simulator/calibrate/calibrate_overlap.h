#pragma once
// kernel_overlap_efficiency refined by simulation. `calibrateFromRuns` fits
// it from the measured timelines (the work done while kernels of two
// compute streams ran side by side), but the simulator's processor sharing
// lets them overlap longer than the GPU does (a resident GEMM keeps its SMs
// and the kernel beside it mostly waits), so that figure overstates what
// the second stream gains. This picks instead the efficiency whose simulated
// step is closest to the measured one over the one-rank runs with a second
// compute stream, the calibration otherwise unchanged.

#include <optional>
#include <vector>

#include "simulator/calibrate/calibrate.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

struct OverlapRefit {
  double efficiency = 1.0;
  int runs = 0;                   // one-rank runs with a second compute stream
  double mean_abs_error_pct = 0;  // of their simulated step at that efficiency
  double from_timelines = 1.0;    // what calibrateFromRuns had fitted
};

// Searches 0.8-1.6 in steps of 0.005 (a coarse grid, then a fine one around
// its best). Sets cal.calibration.kernel_overlap_efficiency; nullopt (and
// the calibration unchanged) when no input run qualifies.
std::optional<OverlapRefit> refitOverlapBySimulation(CalibrationResult& cal,
                                                     const std::vector<CalibrationInput>& inputs,
                                                     const Topology& topology);

}  // namespace tandem::sim
