#pragma once
// A task's main kernel as a trace records it: its thread blocks, what each
// block holds on an SM and a GEMM's tile. Read by the fit from runs
// (calibrate.h) and by the GEMM census (gemm_census.h) alike.

#include <cstdint>
#include <map>
#include <optional>

#include "simulator/cost/gemm_tiles.h"
#include "traces/store/trace_model.h"
#include "traces/store/trace_reader.h"

namespace tandem::sim {

// -1 where the trace did not record it (CostEntry's fields).
struct MainKernel {
  int blocks = 0;
  int threads = -1, registers = -1, shared_bytes = -1, cluster = -1;
  std::optional<GemmTile> tile;  // from the kernel's name; only a GEMM's means one
};

// The kernel of one activity, or nothing for an activity that is no kernel
// or has no launch geometry.
std::optional<MainKernel> mainKernelOf(const traces::ActivityRow& a);

// Per (rank, task id) of `run`: its main kernel, the longest of its kernels
// with a launch geometry.
std::map<std::pair<int, int64_t>, MainKernel> mainKernelsByTask(traces::TraceReader& reader, int64_t run);

}  // namespace tandem::sim
