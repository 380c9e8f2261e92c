#pragma once
// The GEMM census: which kernel the GPU executor gets from cuBLASLt for each
// GEMM of a dense grid of shapes, recorded with its launch geometry and no
// time (`tandem calibrate --gemm-census`, and after every `--sweep`).
//
// Why: the replay's kernel sharing reads a GEMM's blocks and tile (spare
// SMs beside it, the SMs its last round of tiles leaves). For a shape the
// sweep did not time, those were the nearest timed shape's, but cuBLASLt's
// choice jumps between neighbours: on an H100 a weight gradient of 1280 x
// 5120 gets 120 blocks in clusters of 8 (12 SMs free), its swept
// neighbour of 1600 x 4800 132 blocks. In one H100's traces of the 23
// held-out jobs, 348 of the 1,099 backward GEMMs that left SMs free were
// predicted to leave none (docs/accuracy.md). Which kernel a shape gets costs one call to find
// out, where its time at the power limit costs a profiled step, so the
// census covers many more shapes than the sweep: the layer widths of the
// model families (512 to 16384) against each other and the vocabularies,
// at 1k to 64k tokens.
//
// Each problem runs through the executor's own GEMM path (its algorithm
// tuning included) under the profiler, one plan task per problem named by
// its shape key; the census's trace is a real trace file whose run is
// named kGemmCensusRunName.

#include <map>
#include <string>
#include <vector>

#include "engine/ir/gemm_problem.h"
#include "simulator/cost/cost_model.h"

namespace tandem::sim {

inline constexpr const char* kGemmCensusRunName = "gemm-census";

// The problems of grid `name`: "full" (docs/accuracy.md lists its axes) or
// "smoke" (three small ones, to check a machine). Each problem's name is
// the cost model's shape key of the task it stands for. Throws
// std::invalid_argument naming the grids for another name.
std::vector<GemmProblem> gemmCensusGrid(const std::string& name);
std::vector<std::string> gemmCensusGridNames();

// The GEMM census kept in a calibration (Calibration::gemm_kernels).
using GemmKernels = std::map<OpKind, std::map<std::string, CostEntry>>;

struct GemmCensus {
  GemmKernels kernels;
  std::string gpu;       // the device its trace recorded ("NVIDIA H100 80GB HBM3"), or empty
  int problems = 0;      // tasks in the trace
  int without_kernel = 0;  // tasks whose kernel the trace did not record
};

// Reads a census trace (the last run named kGemmCensusRunName in it).
// Throws std::runtime_error naming the file when it holds no such run.
GemmCensus readGemmCensus(const std::string& trace_path);

// The `gemm_kernels:` section of a calibration file, `comment` on its
// first line.
std::string gemmKernelsYaml(const GemmKernels& kernels, const std::string& comment);

// `calibration_yaml` with its `gemm_kernels:` section (if any) replaced by
// `section` (from gemmKernelsYaml), at the end of the file.
std::string withGemmKernels(const std::string& calibration_yaml, const std::string& section);

}  // namespace tandem::sim
