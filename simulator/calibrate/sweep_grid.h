#pragma once
// The shapes `tandem calibrate --sweep` measures on a GPU: a grid of small
// jobs (one or two transformer layers with their embedding and LM head),
// each run for real with profiling, so that every kernel the executor has
// is timed as it runs inside a step (back to back, in the step's CUDA
// Graph, at the GPU's power limit) at shapes spanning GPT-2 124M's layers
// to Llama 3.1 405B's. The calibration fitted from their traces is the
// shipped profile of the GPU (docs/accuracy.md, "The kernel sweep").
//
// Axes of the grid (docs/accuracy.md lists every point):
//   - width: 512 to 16384 (GPT-2 family, heads 64 wide: 512-6144; Llama
//     family, heads 128 wide except one 64-wide point: 2048-16384), with
//     the MLP widths of the models of those sizes (4x; SwiGLU 2.6875x,
//     2.67x, 3.5x, 3.25x) and grouped-query ratios 1, 3, 4 and 8;
//   - tokens per micro-batch: 2k to 64k;
//   - sequence length: 512 to 32k (attention's shapes);
//   - precision: eight points again in FP8 (five Llama, delayed scaling;
//     three GPT-2, current scaling), the in-step FP8 speed-ups and the FP8
//     writers' times against their bf16 twins.
// A point's vocabulary is its family's (GPT-2 50304, Llama 32000).

#include <string>
#include <vector>

#include "engine/spec/job.h"

namespace tandem::sim {

struct SweepPoint {
  std::string name;               // "gpt-c1024-b8x1024": family, width, micro-batch x sequence
  std::string part;               // the named part it belongs to ("gpt", "llama", "fp8"), for sweeps in pieces
  std::vector<std::string> also_in;  // other parts that take it too (the FP8 points' bf16 twins: "fp8")
  std::vector<std::string> sets;  // --set overrides of the default job
};

// The grid of `name`: "full" (the shipped profile's), or "smoke" (three
// small points that run in seconds, to check a machine and the tool). The
// full grid's part "fp8" holds its FP8 points and their bf16 twins, so
// that a sweep of that part alone derives the FP8 speed-ups.
// Throws std::invalid_argument naming the grids for another name.
std::vector<SweepPoint> sweepGrid(const std::string& name);

// The names sweepGrid takes, for --help and errors.
std::vector<std::string> sweepGridNames();

// Whether the point belongs to `part` (its own or one it is also in).
bool inPart(const SweepPoint& point, const std::string& part);

// The job a point runs: the default job with the point's overrides.
JobSpec sweepJob(const SweepPoint& point);

}  // namespace tandem::sim
