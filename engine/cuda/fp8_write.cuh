#pragma once
// What every kernel that writes FP8 shares (fp8.cu's casts, llama.cu's
// norm and activations writing FP8 under delayed scaling): the code of a
// value, and a delayed-scaling writer's closing step.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cuda_runtime.h>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "engine/cuda/check.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {

// The saturating round-to-nearest-even FP8 code of v (engine/numerics/fp8.h):
// kFormat 0 E4M3, 1 E5M2.
template <int kFormat>
__device__ __forceinline__ uint8_t toFp8(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kFormat == 0 ? __NV_E4M3 : __NV_E5M2));
}

// The codes of a and b in one conversion (a in the low byte): each lane
// rounds as toFp8 does, which converts a pair with a zero beside its value.
template <int kFormat>
__device__ __forceinline__ uint32_t toFp8x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kFormat == 0 ? __NV_E4M3 : __NV_E5M2);
}

// Eight values' codes of v * scale, as two little-endian words.
template <int kFormat>
__device__ __forceinline__ uint2 toFp8x8(const float (&v)[8], float scale) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = toFp8x2<kFormat>(__fmul_rn(v[2 * k], scale), __fmul_rn(v[2 * k + 1], scale));
  return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}

// Both layouts of FP8 codes in tiles, the transposed one through shared
// memory: a byte more written per element instead of a pass that reads the
// codes again. A tile's row is padded by a word against bank conflicts.
template <int kRows, int kCols>
using ByteTileOf = uint8_t[kRows][kCols + 4];
constexpr int kTile = 64;
using ByteTile = ByteTileOf<kTile, kTile>;

// The shapes the writers' tiles can take: rows x columns of the output
// ([rows, cols]) per block. 64 x 64 is the default; TANDEM_FP8_TILE=32x128
// or 128x64 picks another (read at each launch, so that one process can
// time every shape), for a benchmark to weigh longer row segments (reads
// and row-major stores) against longer transposed ones.
template <int kR, int kC>
struct TileShape {
  static constexpr int kRows = kR, kCols = kC;
};
enum class Fp8Tile { k64x64, k32x128, k128x64 };
Fp8Tile fp8Tile();  // fp8.cu

// launch(TileShape<..>{}) for the process's tile shape.
template <class Launch>
void withFp8Tiles(Launch launch) {
  switch (fp8Tile()) {
    case Fp8Tile::k32x128: return launch(TileShape<32, 128>{});
    case Fp8Tile::k128x64: return launch(TileShape<128, 64>{});
    default: return launch(TileShape<64, 64>{});
  }
}

// How the writers walk their tiles: a block per tile, or as many blocks as
// are resident at once, each walking tiles gridDim apart and issuing the
// next tile's loads before it stores the current one's codes, so that a
// multiprocessor's loads stay in flight through the stores and barriers.
// Each writer's Values::kLoops says which it takes (the faster at the 1.1B
// Llama's shapes on one H100: the loop for the cast, RMSNorm and SwiGLU
// (214 against 227 us in bench_fp8_writers), whose blocks hold few
// registers; a block per tile for SwiGLU's backward, whose looping blocks
// hold twice as many and fit half as many warps; GPT-2's writers, not
// measured looping, a block per tile as before);
// TANDEM_FP8_WRITER=tiles or loop takes one for every writer (read at each
// launch, as TANDEM_FP8_TILE is).
enum class Fp8Walk { kPerWriter, kTiles, kLoop };
Fp8Walk fp8Walk();  // fp8.cu

// What a tiled writer computes, in two steps so that loads can be issued
// early: Values::load(r, c, raw) reads the kLoads 16-byte vectors that
// belong to 8 elements of row r from column c, Values::compute(r, c, raw,
// v) makes the kParts outputs' 8 values from them (reading what is shared
// between tiles itself: weights, per-row statistics); Values::kLoops is
// its walk (fp8Walk).
template <class Values>
__device__ __forceinline__ void valuesAt(const Values& values, int64_t r, int64_t c,
                                         float (&v)[Values::kParts][8]) {
  uint4 raw[Values::kLoads];
  values.load(r, c, raw);
  values.compute(r, c, raw, v);
}

// The kParts FP8 outputs of a writer: out[p] at row stride ld, their
// transposed copies out_t[p] ([cols, rows]).
template <int kParts>
struct TileOutputs {
  uint8_t* out[kParts];
  uint8_t* out_t[kParts];
  int64_t ld;
};

// The tile of in[r0.., c0..] (in[rows, cols]) stored transposed into
// out[cols, rows], four tile rows per 4-byte word; after __syncthreads.
template <int kRows, int kCols>
__device__ __forceinline__ void storeTileTransposed(uint8_t* out, const ByteTileOf<kRows, kCols>& tile, int64_t r0,
                                                    int64_t c0, int64_t rows, int64_t cols) {
  constexpr int kWords = kRows / 4;  // 4-byte words per transposed tile row
  for (int idx = threadIdx.x; idx < kCols * kWords; idx += blockDim.x) {
    const int oc = idx / kWords, ow = idx % kWords;  // output row (a tile column), output word (4 tile rows)
    if (c0 + oc >= cols || r0 + 4 * ow >= rows) continue;
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) word |= uint32_t(tile[4 * ow + b][oc]) << (8 * b);
    *reinterpret_cast<uint32_t*>(out + (c0 + oc) * rows + r0 + 4 * ow) = word;
  }
}

// The block's tiles at (r0, c0) of kParts FP8 outputs [rows, cols], each
// stored with row stride ld at out[p] and transposed ([cols, rows]) at
// out_t[p]: values (valuesAt) gives the 8 values of each part of row r from
// column c (f[kParts][8]; cols a multiple of 8, rows of 4); the codes of
// value x scale. Returns the largest |value| this thread saw. Launched with
// kBlock threads, every one of which calls it (it synchronizes).
//
// A thread reads all its values before it writes a code: a store between
// two chunks' loads makes the second wait for the first (the compiler cannot
// tell the outputs from the inputs), and a tile's kernel then ran at half
// the bandwidth of the bf16 kernel writing the same bytes (SwiGLU's backward
// 12.2 ms against 6.8 per step of the 1.1B Llama on one H100). Parts made
// from the same inputs (SwiGLU's d gate and d up) are computed once.
template <int kFormat, int kBlock, class Shape, int kParts, class Values>
__device__ __forceinline__ float storeTilesBothLayouts(uint8_t* const (&out)[kParts], int64_t ld,
                                                       uint8_t* const (&out_t)[kParts], int64_t rows, int64_t cols,
                                                       int64_t r0, int64_t c0, float scale,
                                                       ByteTileOf<Shape::kRows, Shape::kCols> (&tiles)[kParts],
                                                       Values values) {
  constexpr int kChunks = Shape::kCols / 8;  // 8-value chunks per tile row
  static_assert(Shape::kRows * kChunks % kBlock == 0, "a tile's chunks spread evenly over the block");
  constexpr int kPer = Shape::kRows * kChunks / kBlock;  // chunks per thread
  float f[kPer][kParts][8];
  bool inside[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = int(threadIdx.x) + j * kBlock;
    const int64_t r = r0 + idx / kChunks, c = c0 + 8 * (idx % kChunks);
    inside[j] = r < rows && c < cols;
    if (inside[j]) valuesAt(values, r, c, f[j]);
  }
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = int(threadIdx.x) + j * kBlock;
    const int tr = idx / kChunks, tc = idx % kChunks;
    const int64_t r = r0 + tr, c = c0 + 8 * tc;
#pragma unroll
    for (int p = 0; p < kParts; ++p) {
      uint2 codes = make_uint2(0, 0);
      if (inside[j]) {
#pragma unroll
        for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[j][p][k]));
        codes = toFp8x8<kFormat>(f[j][p], scale);
        *reinterpret_cast<uint2*>(out[p] + r * ld + c) = codes;
      }
      *reinterpret_cast<uint32_t*>(&tiles[p][tr][8 * tc]) = codes.x;
      *reinterpret_cast<uint32_t*>(&tiles[p][tr][8 * tc + 4]) = codes.y;
    }
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kParts; ++p)
    storeTileTransposed<Shape::kRows, Shape::kCols>(out_t[p], tiles[p], r0, c0, rows, cols);
  __syncthreads();  // the tiles may be filled again
  return m;
}

// Whether the tiled writers take these buffers: bf16 inputs of whole
// 16-byte vectors (cols a multiple of 8), rows a multiple of 4, the codes
// 8-byte aligned.
inline bool tiledWriterTakes(DType dt, int64_t rows, int64_t cols, std::initializer_list<const void*> inputs,
                             std::initializer_list<const void*> codes) {
  if (dt != DType::BF16 || !vec8(cols, inputs) || rows % 4 != 0) return false;
  for (const void* p : codes)
    if (reinterpret_cast<uintptr_t>(p) % 8 != 0) return false;
  return true;
}

// Closes a delayed-scaling write: the block's largest |value| (m, each
// thread's; fmaxf has skipped NaN) into its key's amax for this step, and
// 1 / scale for the GEMMs that read the output (block 0). An atomic max of
// a non-negative float's bits is the float's max, whatever the order the
// blocks come in: the state is the same bits in a graph replay and an eager
// step. Every thread of the block calls it.
__device__ __forceinline__ void finishFp8Write(float m, float scale, const Fp8Write& w) {
  __shared__ float shared[32];
  m = blockMax(m, shared);
  if (threadIdx.x != 0) return;
  // Most blocks see a smaller amax than one already there: read first.
  const unsigned bits = __float_as_uint(m);
  if (m > 0.f && bits > *reinterpret_cast<volatile unsigned*>(w.amax)) atomicMax(w.amax, bits);
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    const float inv = __frcp_rn(scale);
    *w.scale_inv = inv;
    if (w.scale_inv_t) *w.scale_inv_t = inv;
  }
}

// A writer's tiles, a block per tile (grid x the column tiles, y the row
// tiles).
template <int kFormat, int kBlock, class Shape, class Values>
__global__ void __launch_bounds__(kBlock)
    writeTilesKernel(TileOutputs<Values::kParts> o, int64_t rows, int64_t cols, Fp8Write w, Values values) {
  __shared__ __align__(16) ByteTileOf<Shape::kRows, Shape::kCols> tiles[Values::kParts];
  const float scale = *w.scale;
  const float m = storeTilesBothLayouts<kFormat, kBlock, Shape>(o.out, o.ld, o.out_t, rows, cols,
                                                                int64_t(blockIdx.y) * Shape::kRows,
                                                                int64_t(blockIdx.x) * Shape::kCols, scale, tiles, values);
  finishFp8Write(m, scale, w);
}

// The same tiles walked by resident blocks (fp8WriterLoops): tile t is row
// tile t / column tiles, column tile t % column tiles, as the grid above
// orders them. The codes of tile t are made before the loads of tile t +
// gridDim are issued, and stored after: those loads are in flight through
// the stores and both barriers.
template <int kFormat, int kBlock, class Shape, class Values>
__global__ void __launch_bounds__(kBlock)
    writeTilesLoopKernel(TileOutputs<Values::kParts> o, int64_t rows, int64_t cols, Fp8Write w, Values values) {
  constexpr int kParts = Values::kParts, kChunks = Shape::kCols / 8;
  static_assert(Shape::kRows * kChunks % kBlock == 0, "a tile's chunks spread evenly over the block");
  constexpr int kPer = Shape::kRows * kChunks / kBlock;  // chunks per thread
  __shared__ __align__(16) ByteTileOf<Shape::kRows, Shape::kCols> tiles[kParts];
  const float scale = *w.scale;
  const int64_t col_tiles = (cols + Shape::kCols - 1) / Shape::kCols;
  const int64_t n = col_tiles * ((rows + Shape::kRows - 1) / Shape::kRows);
  uint4 raw[kPer][Values::kLoads];
  bool inside[kPer];
  auto load = [&](int64_t t) {
    const int64_t r0 = t / col_tiles * Shape::kRows, c0 = t % col_tiles * Shape::kCols;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int idx = int(threadIdx.x) + j * kBlock;
      const int64_t r = r0 + idx / kChunks, c = c0 + 8 * (idx % kChunks);
      inside[j] = r < rows && c < cols;
      if (inside[j]) values.load(r, c, raw[j]);
    }
  };
  float m = 0.f;
  int64_t t = blockIdx.x;
  if (t < n) load(t);
  for (; t < n; t += gridDim.x) {
    const int64_t r0 = t / col_tiles * Shape::kRows, c0 = t % col_tiles * Shape::kCols;
    uint2 codes[kPer][kParts];
    bool here[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int idx = int(threadIdx.x) + j * kBlock;
      here[j] = inside[j];
#pragma unroll
      for (int p = 0; p < kParts; ++p) codes[j][p] = make_uint2(0, 0);
      if (!here[j]) continue;
      float f[kParts][8];
      values.compute(r0 + idx / kChunks, c0 + 8 * (idx % kChunks), raw[j], f);
#pragma unroll
      for (int p = 0; p < kParts; ++p) {
#pragma unroll
        for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[p][k]));
        codes[j][p] = toFp8x8<kFormat>(f[p], scale);
      }
    }
    if (t + gridDim.x < n) load(t + gridDim.x);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int idx = int(threadIdx.x) + j * kBlock;
      const int tr = idx / kChunks, tc = idx % kChunks;
#pragma unroll
      for (int p = 0; p < kParts; ++p) {
        if (here[j]) *reinterpret_cast<uint2*>(o.out[p] + (r0 + tr) * o.ld + c0 + 8 * tc) = codes[j][p];
        *reinterpret_cast<uint32_t*>(&tiles[p][tr][8 * tc]) = codes[j][p].x;
        *reinterpret_cast<uint32_t*>(&tiles[p][tr][8 * tc + 4]) = codes[j][p].y;
      }
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kParts; ++p)
      storeTileTransposed<Shape::kRows, Shape::kCols>(o.out_t[p], tiles[p], r0, c0, rows, cols);
    __syncthreads();  // the tiles may be filled again
  }
  finishFp8Write(m, scale, w);
}

// The blocks of kKernel (kBlock threads) resident on the whole GPU at once,
// asked once per kernel.
template <auto kKernel, int kBlock>
int residentBlocks() {
  static const int n = [] {
    int per_sm = 0;
    TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kBlock, 0));
    return std::max(per_sm, 1) * smCount();
  }();
  return n;
}

// The grid of a block per tile of Shape over [rows, cols]; `who` names the
// caller in the error for more row tiles than a grid's 65535.
template <class Shape>
dim3 tileGrid(int64_t rows, int64_t cols, const char* who) {
  const int64_t row_tiles = (rows + Shape::kRows - 1) / Shape::kRows;
  if (row_tiles > 65535) throw CudaError(std::string(who) + ": too many rows for one launch");
  return dim3(unsigned((cols + Shape::kCols - 1) / Shape::kCols), unsigned(row_tiles));
}

// Launches a delayed-scaling writer of kBlock threads for the process's
// tile shape and its walk (fp8Tile, fp8Walk).
template <int kBlock, class Values>
void launchFp8Tiles(const TileOutputs<Values::kParts>& o, int64_t rows, int64_t cols, const Fp8Write& w,
                    const Values& values, cudaStream_t s, const char* who) {
  const Fp8Walk walk = fp8Walk();
  const bool loops = walk == Fp8Walk::kPerWriter ? Values::kLoops : walk == Fp8Walk::kLoop;
  withFp8Tiles([&](auto shape) {
    using Shape = decltype(shape);
    const dim3 grid = tileGrid<Shape>(rows, cols, who);
    auto launch = [&](auto format) {
      constexpr int kFormat = decltype(format)::value;
      if (loops) {
        const int64_t blocks = std::min<int64_t>(
            int64_t(grid.x) * grid.y, residentBlocks<writeTilesLoopKernel<kFormat, kBlock, Shape, Values>, kBlock>());
        writeTilesLoopKernel<kFormat, kBlock, Shape><<<unsigned(blocks), kBlock, 0, s>>>(o, rows, cols, w, values);
      } else {
        writeTilesKernel<kFormat, kBlock, Shape><<<grid, kBlock, 0, s>>>(o, rows, cols, w, values);
      }
    };
    if (w.format == Fp8Format::E4M3) launch(std::integral_constant<int, 0>{});
    else launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace tandem::cuda
