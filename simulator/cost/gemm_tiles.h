#pragma once
// How a GEMM's output is cut into tiles, the unit its thread blocks work on:
// the tile its kernel names (cuBLASLt's nvjet and xmma kernels, CUTLASS's)
// and the tiles of a task's output. A persistent GEMM runs one block per SM
// and walks its tiles in rounds; the last round's unfilled SMs are where the
// next kernel's blocks land first (replay.cpp, kernel sharing).

#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/plan/plan.h"

namespace tandem::sim {

// A GEMM kernel's output tile as the library names it: M along cuBLAS's
// column-major rows (a row-major output's columns), N along its columns.
struct GemmTile {
  int m = 0, n = 0;
  bool operator==(const GemmTile&) const = default;
};

// The tile in a GEMM kernel's name ("nvjet_sm90_tst_320x128_64x3_2x1_v_bz_NTT"
// -> 320 x 128; "..._tilesize128x256x64_..." -> 128 x 256; CUTLASS's
// "..._128x256x64_2x1x1_..." -> 128 x 256); nothing for other names.
std::optional<GemmTile> gemmTileFromKernelName(std::string_view name);

// "MxN" as a calibration file writes a tile ("320x128"); nothing unless
// that is all the text holds.
std::optional<GemmTile> parseGemmTile(std::string_view text);

// The tiles a GEMM task's output (y, dx or dW by its kind) is cut into: by
// `tile` where known (its M along the output's columns), else by the largest
// tile Hopper's GEMMs use (256 x 128) either way round, the fewest any of
// them would cut it into; 0 for other kinds.
int64_t gemmOutputTiles(const Task& task, std::optional<GemmTile> tile = std::nullopt);

// The shape key's field a GEMM task sums over (k for y = x W, n for dx, m,
// the tokens, for dW); empty for other kinds.
std::string_view gemmReductionField(const Task& task);

}  // namespace tandem::sim
