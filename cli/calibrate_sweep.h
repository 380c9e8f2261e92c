#pragma once
// `tandem calibrate --sweep`: runs the points of a sweep grid
// (simulator/calibrate/sweep_grid.h) on this machine's GPU, each as
// `tandem run --profile` in a process of its own (a point that fails or
// runs out of memory takes nothing else down), and returns the traces
// that the calibration is then fitted from.

#include <string>
#include <vector>

namespace tandem::cli {

struct SweepOptions {
  std::string grid = "full";
  std::vector<std::string> parts;  // empty: every part of the grid
  std::string work_dir;            // traces and logs, one pair per point
  int steps = 8;                   // profiled steps per point, at least
  // Each point runs steps for about this long at least (its step time
  // estimated by the roofline), so that its kernels are timed at the GPU's
  // steady state: a few steps of a small job run on a cool GPU at full
  // boost clock, where a training run holds its power limit (measured on
  // H200: 125 W and 1980 MHz against 700 W and 1635 MHz).
  double warm_seconds = 2.0;
  double time_limit_s = 0;         // > 0: start no point after this many seconds
  bool reuse = false;              // keep the traces of points already in work_dir
  bool dry_run = false;            // plan every point and say whether it fits, run nothing
  double gpu_memory_gib = 139;     // for the dry run's fit check (one H200's usable memory)
};

// The traces of the points that ran (or were reused), in grid order. Prints
// one progress line per point on stderr and a summary; a point that fails
// is named with its log and left out. Throws when no point ran.
std::vector<std::string> runSweep(const SweepOptions& o);

}  // namespace tandem::cli
