// Causal attention on the tensor cores (bf16, heads 64 or 128 wide), in the
// style of FlashAttention-2: 64-row tiles, four warps per block each owning
// 16 rows. The tile products run on Hopper's wgmma where the device has the
// sm_90a code (the block is one warpgroup; wgmma.cuh), else on mma.sync
// m16n8k16 with ldmatrix, through inline PTX either way. Scores,
// probabilities and dS never leave the registers: the fp32 C fragments of one
// product are packed to bf16 and used directly as the A fragments of the
// next. Streamed tiles live in a swizzled shared layout (16-byte chunk c of
// row r sits at chunk c ^ (r & 7)), so ldmatrix and the copies are free of
// bank conflicts; three stages keep two tiles in flight while one is used,
// with one block barrier per tile. On the wgmma path one thread copies each
// tile with the TMA (a box of a 3-D tensor map; the box's 128-byte swizzle
// is the same layout) and the block waits on the stage's mbarrier; on the
// mma.sync path every thread issues cp.async. The TMA took the copies'
// address arithmetic off every thread: GPT-2 124M's attention backward
// 3.53 -> 3.36 ms and 2.44 -> 2.32 J per step on one H200
// (bench_energy_by_op), the forward unchanged. Never stores T x T.
//
// Heads 128 wide (Llama 2 and 3, GPT-3's shapes) run on the wgmma path only:
// a tile row of 256 bytes is two 64-column swizzle atoms, 8 KiB apart in
// shared memory (each atom is one TMA box), the scores' contraction walks
// both atoms and P V is one m64n128 product whose B operand spans them. The
// tiles are twice as large, so these kernels keep two stages in flight
// instead of three (two blocks per SM fit).
//
// Backward in two kernels so every output element has one writer (no
// atomics, deterministic): dQ per query tile looping over the key tiles up to
// it, which also computes delta = rowsum(dO * O) for its rows, then dK/dV per
// key tile looping over the query tiles at or after it; both rebuild P from
// the forward's log-sum-exp. Accumulation is fp32; P and dS
// are rounded to bf16 only as matrix-unit operands.
//
// The kernels find a head's columns through an AttnLayout (attention_tc.h):
// multi-head attention's [q | k | v] rows, or grouped-query attention's
// groups read in place (engine/cuda/llama.cu), where query head h uses
// key/value head h / group, the dK/dV block of a key/value head loops over
// its group's query heads (the group's sum stays in registers), and dQ and
// dK are rotated back by the rotary angles as they are stored.
#include <cuda.h>  // CUtensorMap
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/cuda/attention_tc.h"
#include "engine/cuda/cp_async.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/mbarrier.cuh"
#include "engine/cuda/tensor_map.h"
#include "engine/cuda/wgmma.cuh"

namespace tandem::cuda {
namespace {

constexpr int kTile = 64;                    // rows of queries and keys per tile
constexpr int kWarps = 4;                    // 16 rows each
constexpr int kThreads = kWarps * 32;
constexpr int kAtomBytes = kTile * 64 * 2;   // 8 KiB: 64 rows of one 128-byte swizzle atom (64 columns)

// What a head width fixes: tile sizes and the pipeline's depth.
template <int kD>
struct Head {
  static_assert(kD == 64 || kD == 128, "heads 64 or 128 wide");
  static constexpr int kTileBytes = kTile * kD * 2;  // 8 or 16 KiB
  static constexpr int kFrags = kD / 8;              // 8-column C fragments across a head row
  // Streamed tiles: two in flight while one is used; at 128 one, so that
  // two blocks' tiles fit in an SM's shared memory.
  static constexpr int kStages = kD == 64 ? 3 : 2;
};
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX helpers ----------------------------------------------------------

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b (16x8 fp32 += 16x16 bf16 * 16x8 bf16)
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (flushes denormal results to zero; 2^-inf = 0).
__device__ __forceinline__ float exp2Fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- tiles and fragments --------------------------------------------------
//
// Fragment layouts (lane = 4 * g + t): a 16x8 fp32 C fragment holds
// (row g, cols 2t, 2t+1) in c[0..1] and (row g+8, same cols) in c[2..3]; a
// 16x64 result is 8 such fragments f[j] covering cols 8j..8j+7 (a 16x128
// result 16).

template <int kD>
using AccOf = float[Head<kD>::kFrags][4];
using Acc = AccOf<64>;  // the mma.sync helpers' results (heads 64 wide)

template <int kFrags>
__device__ __forceinline__ void zero(float (&a)[kFrags][4]) {
#pragma unroll
  for (int j = 0; j < kFrags; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[j][e] = 0.f;
}

// Copies rows [row0, row0 + 64) of a bf16 matrix (first column at `base`,
// row pitch `stride`) into a swizzled tile; rows at or past Tn are zeroed.
__device__ __forceinline__ void loadTileAsync(uint32_t tile, const bf16* base, int row0, int Tn, int64_t stride) {
#pragma unroll
  for (int i = 0; i < kTile * 8 / kThreads; ++i) {
    const int e = threadIdx.x + i * kThreads, r = e >> 3, c = e & 7;
    const bool valid = row0 + r < Tn;
    cpAsync16(tile + swz(r, c), base + (valid ? int64_t(row0 + r) * stride + c * 8 : 0), valid);
  }
}

// A fragments of rows [row0, row0 + 16) of a tile: f[kc] covers columns
// 16kc..16kc+15.
__device__ __forceinline__ void loadRowFrags(uint32_t (&f)[4][4], uint32_t tile, int row0) {
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane & 15);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) ldsm4(f[kc], tile + swz(row, kc * 2 + (lane >> 4)));
}

// acc = A * Y^T for A (16 x 64, fragments) and rows [col0, col0 + 8 kFrags)
// of a 64 x 64 tile Y (rows are the output columns): scores Q K^T and the like.
template <int kFrags>
__device__ __forceinline__ void fragsTimesTileT(float (&acc)[kFrags][4], const uint32_t (&a)[4][4], uint32_t y,
                                                int col0 = 0) {
  const int lane = threadIdx.x & 31;
  const int row = (lane & 7) + ((lane >> 4) << 3), hi = (lane >> 3) & 1;
  zero(acc);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
    for (int np = 0; np < kFrags / 2; ++np) {
      uint32_t b[4];
      ldsm4(b, y + swz(col0 + np * 16 + row, kc * 2 + hi));
      mma(acc[2 * np], a[kc], b[0], b[1]);
      mma(acc[2 * np + 1], a[kc], b[2], b[3]);
    }
  }
}

// The A fragment (16 x 16, bf16) of columns [16 kc, 16 kc + 16) of P, a
// warp's 16 x 8 kFrags C fragments in fp32: two C fragments side by side.
template <int kFrags>
__device__ __forceinline__ void packAFragment(const float (&p)[kFrags][4], int kc, uint32_t (&a)[4]) {
  a[0] = packBf16(p[2 * kc][0], p[2 * kc][1]);
  a[1] = packBf16(p[2 * kc][2], p[2 * kc][3]);
  a[2] = packBf16(p[2 * kc + 1][0], p[2 * kc + 1][1]);
  a[3] = packBf16(p[2 * kc + 1][2], p[2 * kc + 1][3]);
}

// acc += P * Y for P (16 x 8 kFrags, C fragments in fp32, rounded to bf16
// here) and rows [row0, row0 + 8 kFrags) of a 64 x 64 tile Y (rows are the
// contraction index).
template <int kFrags>
__device__ __forceinline__ void probsTimesTile(Acc& acc, const float (&p)[kFrags][4], uint32_t y, int row0 = 0) {
  const int lane = threadIdx.x & 31;
  const int row = (lane & 7) + (((lane >> 3) & 1) << 3), hi = lane >> 4;
#pragma unroll
  for (int kc = 0; kc < kFrags / 2; ++kc) {
    uint32_t a[4];
    packAFragment(p, kc, a);
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      uint32_t b[4];
      ldsm4t(b, y + swz(row0 + kc * 16 + row, dp * 2 + hi));
      mma(acc[2 * dp], a, b[0], b[1]);
      mma(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Writes a warp's 16 x 8 kN result (times `mul`) to rows [row0, row0 + 16)
// of dst (row pitch `stride`), adding what is there when `accumulate`.
template <int kN>
__device__ __forceinline__ void storeRows(bf16* dst, int64_t stride, int row0, int Tn, const float (&acc)[kN][4],
                                          float mul, bool accumulate) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = row0 + g + 8 * hh;
    if (row >= Tn) continue;
    bf16* p = dst + int64_t(row) * stride + 2 * t;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      float x0 = acc[j][2 * hh] * mul, x1 = acc[j][2 * hh + 1] * mul;
      __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(p + 8 * j);
      if (accumulate) {
        const float2 old = __bfloat1622float2(*q);
        x0 += old.x, x1 += old.y;
      }
      *q = __floats2bfloat162_rn(x0, x1);
    }
  }
}

// storeRows for an FP8 destination (Fp8GradOut, not accumulating): the
// warp's 16 x 8 kN values (times `mul`) as codes of value x scale at
// columns [col0, col0 + 8 kN) of rows token0 + [row0, row0 + 16) in both
// layouts, from the values in fp32 (as the CPU reference quantizes them).
// A thread holds two adjacent columns of rows g and g + 8: one 2-byte store
// each in the row-major copy. In the transposed copy a column's 16 rows are
// 16 consecutive bytes: lanes 0-15 gather four rows of one column each by
// shuffles (the blocks keep no shared memory free for a staged tile) and
// store them as a word, rows 4 g to 4 g + 3. Returns the largest |value|
// the thread saw. Every lane of the warp calls it.
template <int kN>
__device__ __forceinline__ float storeRowsFp8(const Fp8GradOut& o, int64_t width, int64_t col0, int64_t token0,
                                              int row0, int Tn, const float (&acc)[kN][4], float mul, float scale) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const __nv_fp8_interpretation_t format = o.w.format == Fp8Format::E5M2 ? __NV_E5M2 : __NV_E4M3;
  // Rows 4 g + i of this lane's word: row 4 (g & 1) + i of lane group (g & 1)
  // when g < 2, else the same lanes' second row (+ 8): lane 16 (g & 1) + t + 4 i,
  // byte `half` of what it sends.
  const int first = 16 * (g & 1) + t, half = (g >> 1) & 1;
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    uint32_t both[2];  // codes of columns 8 j + 2 t (low byte) and 8 j + 2 t + 1: rows g, g + 8
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float x0 = acc[j][2 * hh] * mul, x1 = acc[j][2 * hh + 1] * mul;
      m = fmaxf(m, fmaxf(fabsf(x0), fabsf(x1)));
      both[hh] = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(x0, scale), __fmul_rn(x1, scale)), __NV_SATFINITE,
                                          format);
      const int row = row0 + g + 8 * hh;
      if (row < Tn)
        *reinterpret_cast<uint16_t*>(o.rows + (token0 + row) * width + col0 + 8 * j + 2 * t) = uint16_t(both[hh]);
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint32_t mine = ((both[0] >> (8 * p)) & 0xffu) | (((both[1] >> (8 * p)) & 0xffu) << 8);
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t from = __shfl_sync(0xffffffffu, mine, first + 4 * i);
        word |= ((from >> (8 * half)) & 0xffu) << (8 * i);
      }
      const int row = row0 + 4 * g;  // Tn is a multiple of 4: the word's rows are all in or all out
      if (g < 4 && row < Tn)
        *reinterpret_cast<uint32_t*>(o.cols + (col0 + 8 * j + 2 * t + p) * o.tokens + token0 + row) = word;
    }
  }
  return m;
}

// The delayed-scaling writer's closing step (finishFp8Write in
// fp8_write.cuh): the block's largest |value| into the key's amax, and block
// (0, 0) writes 1 / scale. m: each thread's; every thread calls it. The
// amax goes by one reduction per block that nobody waits for: a read of
// the key first (as the memory-bound writers do) would hold each of these
// short blocks for a round trip at its end. Measured on one H100, the
// epilogue's cost is its stores, not this (docs/benchmarks.md).
__device__ __forceinline__ void finishFp8Grad(const Fp8GradOut& o, float m, float scale) {
  __shared__ float warp_max[kThreads / 32];
  m = warpMax(m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  if (m > 0.f) atomicMax(o.w.amax, __float_as_uint(m));
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    const float inv = __frcp_rn(scale);
    *o.w.scale_inv = inv;
    if (o.w.scale_inv_t) *o.w.scale_inv_t = inv;
  }
}

// Column sums over the block's 64 rows of what storeRows stores with
// accumulate off (each value rounded to bf16 as stored), in a fixed order:
// one row of the bias gradient's partial sums (engine/passes/bias_grad.h),
// written to out[0, 8 kN). Every thread of the block calls it after its last
// use of `red`, 4 x 8 kN floats of shared memory.
template <int kN>
__device__ __forceinline__ void tileColumnSums(float* out, const float (&acc)[kN][4], float mul, int row0, int Tn,
                                               float* red) {
  constexpr int kCols = 8 * kN;
  static_assert(kCols <= kThreads, "a thread per column");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float cs[kN][2];
#pragma unroll
  for (int j = 0; j < kN; ++j) cs[j][0] = cs[j][1] = 0.f;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (row0 + g + 8 * hh >= Tn) continue;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float2 v = __bfloat1622float2(__floats2bfloat162_rn(acc[j][2 * hh] * mul, acc[j][2 * hh + 1] * mul));
      cs[j][0] += v.x;
      cs[j][1] += v.y;
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) cs[j][e] += __shfl_xor_sync(0xffffffffu, cs[j][e], off);
  __syncthreads();  // every warp is done with `red` (the caller's tiles)
  if (g == 0)
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      red[warp * kCols + 8 * j + 2 * t] = cs[j][0];
      red[warp * kCols + 8 * j + 2 * t + 1] = cs[j][1];
    }
  __syncthreads();
  if (threadIdx.x < kCols)
    out[threadIdx.x] = ((red[threadIdx.x] + red[kCols + threadIdx.x]) + red[2 * kCols + threadIdx.x]) +
                       red[3 * kCols + threadIdx.x];
}

// ---- the same products on wgmma (sm_90a) ---------------------------------
//
// The block's four warps act as one warpgroup on 64-row tiles. These only
// issue: the caller fences, commits, waits and then fences the results (and
// the packed A registers, which wgmma reads until it completes).

// acc = X * Y^T for the block's 64-row tile X and rows [col0, col0 + 8 kFrags)
// of tile Y, both in shared memory, rows kD wide (contraction along the rows:
// K-major; a 128-wide row's second half in the tile's second swizzle atom).
template <int kD, int kFrags>
__device__ __forceinline__ void wgTileTimesTileT(float (&acc)[kFrags][4], uint32_t x, uint32_t y, int col0 = 0) {
  static_assert(kFrags == 8 || kFrags == 4, "64 or 32 columns");
#pragma unroll
  for (int kc = 0; kc < kD / 16; ++kc) {
    const uint32_t k_off = (kc >> 2) * kAtomBytes + (kc & 3) * 32;
    const uint64_t dx = wgmmaDesc(x + k_off), dy = wgmmaDesc(y + col0 * 128 + k_off);
    if constexpr (kFrags == 8)
      wgmmaSS64(acc, dx, dy, kc > 0);
    else
      wgmmaSS32(acc, dx, dy, kc > 0);
  }
}

// acc += P * Y for P (each warp's 16 x 8 kFrags C fragments, packed to bf16
// into `a`) and rows [row0, row0 + 8 kFrags) of tile Y, 8 kN columns
// (contraction down the rows: MN-major; 128 columns span the tile's two
// swizzle atoms, the descriptor's leading byte offset apart).
template <int kN, int kFrags>
__device__ __forceinline__ void wgProbsTimesTile(float (&acc)[kN][4], const float (&p)[kFrags][4], uint32_t y,
                                                 int row0, uint32_t (&a)[kFrags / 2][4]) {
  static_assert(kN == 8 || kN == 16, "64 or 128 columns");
#pragma unroll
  for (int kc = 0; kc < kFrags / 2; ++kc) packAFragment(p, kc, a[kc]);
  wgmmaFence();
#pragma unroll
  for (int kc = 0; kc < kFrags / 2; ++kc) {
    const uint32_t rows = y + (row0 + kc * 16) * 128;
    if constexpr (kN == 8)
      wgmmaRS64T(acc, a[kc], wgmmaDesc(rows));
    else
      wgmmaRS128T(acc, a[kc], wgmmaDescLbo(rows, kAtomBytes));
  }
}

// Commits the issued wgmmas and waits for all of them; the caller then pins
// each result and the packed A registers with wgmmaFenceOperands.
__device__ __forceinline__ void wgCommitWait() {
  wgmmaCommit();
  wgmmaWait<0>();
}

// wgmma's 128-byte swizzle repeats on 1024-byte boundaries: the tiles must
// start on one.
template <bool kWg>
__device__ __forceinline__ void checkTileAlignment(const void* smem) {
  if constexpr (kWg)
    if (smemAddr(smem) & 1023u) __trap();
}

// Box (column x, row y, batch z) of a 3-D tensor map (tensor_map.h) into the
// swizzled tile at dst, its bytes counted on barrier `bar`. Only the wgmma
// kernels (sm_90a) use it.
__device__ __forceinline__ void tmaTile(uint32_t dst, const CUtensorMap& map, int x, int y, int z, uint32_t bar) {
#if TANDEM_WGMMA_COMPILED
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// Rows [y, y + 64) of a head's kD columns starting at column x: one box per
// 64-column swizzle atom, the atoms kAtomBytes apart at dst.
template <int kD>
__device__ __forceinline__ void tmaHeadTile(uint32_t dst, const CUtensorMap& map, int x, int y, int z, uint32_t bar) {
#pragma unroll
  for (int atom = 0; atom < kD / 64; ++atom) tmaTile(dst + atom * kAtomBytes, map, x + atom * 64, y, z, bar);
}

// The streamed tiles' barriers on the TMA path: stage i's at bars + 8 i, the
// block's fixed tiles' at bars + 8 kStages. Thread 0 initialises them and
// issues every copy; the block meets before anyone waits.
template <int kStages>
__device__ __forceinline__ void initTileBarriers(uint32_t bars) {
  if (threadIdx.x == 0) {
    for (int i = 0; i <= kStages; ++i) mbarInit(bars + 8 * i, 1);
    fenceMbarrierInit();
  }
}

// TMA path, before the loop over streamed tiles: thread 0 initialises the
// barriers, `fixed(bar)` copies the block's fixed tiles (counting their bytes
// on `bar`), `load(t)` streamed tiles 0 .. kStages - 2; then the block meets.
template <int kStages, class Fixed, class Load>
__device__ __forceinline__ void startTmaTiles(uint32_t bars, int n_tiles, Fixed fixed, Load load) {
  initTileBarriers<kStages>(bars);
  if (threadIdx.x == 0) {
    fixed(bars + 8 * kStages);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i)
      if (i < n_tiles) load(i);
  }
  __syncthreads();
}

// TMA path, at the top of streamed iteration `it`: once every warp is done
// with tile it - 1 (block barrier), `refill` may refill its stage with tile
// it + kStages - 1 (copies from thread 0 only); then waits until tile `it`
// (and, first, the block's fixed tiles) has landed.
template <int kStages, class Refill>
__device__ __forceinline__ void awaitTmaTile(uint32_t bars, int it, Refill refill) {
  if (it > 0) __syncthreads();
  refill();
  if (it == 0) mbarWait(bars + 8 * kStages, 0);
  mbarWait(bars + 8 * (it % kStages), (it / kStages) & 1);
}

// A key/value head's K and V as the kernels stream them: the TMA's maps
// and columns (wgmma path) and the cp.async path's pointers to batch b's
// first K and V columns with their row pitches.
struct KvSource {
  const CUtensorMap& k_map;
  const CUtensorMap& v_map;
  int k_col, v_col;
  const bf16* kb;
  const bf16* vb;
  int64_t k_pitch, v_pitch;
};

// The K and V tiles of key tile `tile` into its stage (of kStages, from
// `skv`): the TMA from thread 0 (kWg) or every thread's cp.async.
template <int kD, bool kWg>
__device__ __forceinline__ void loadKvStage(uint32_t skv, uint32_t bars, int tile, const KvSource& src, int b,
                                            int Tn) {
  constexpr int kStages = Head<kD>::kStages, kTileBytes = Head<kD>::kTileBytes;
  const uint32_t st = skv + (tile % kStages) * 2 * kTileBytes;
  if constexpr (kWg) {
    const uint32_t bar = bars + 8 * (tile % kStages);
    mbarExpectBytes(bar, 2 * kTileBytes);
    tmaHeadTile<kD>(st, src.k_map, src.k_col, tile * kTile, b, bar);
    tmaHeadTile<kD>(st + kTileBytes, src.v_map, src.v_col, tile * kTile, b, bar);
  } else {
    static_assert(kWg || kD == 64, "heads 128 wide run on wgmma only");
    loadTileAsync(st, src.kb, tile * kTile, Tn, src.k_pitch);
    loadTileAsync(st + kTileBytes, src.vb, tile * kTile, Tn, src.v_pitch);
  }
}

// Rotates a warp's 16 rows of a head's dQ or dK back by the rotary angles of
// their positions (rope: [Tn][kD/2] (cos, sin), engine/cuda/llama.cu):
// column i pairs with i + kD/2, both in the same thread (fragments j and
// j + kN/2), so the gradient of the unrotated input is stored directly.
template <int kN>
__device__ __forceinline__ void rotateRowsBack(float (&acc)[kN][4], const float2* rope, int row0, int Tn) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = row0 + g + 8 * hh;
    if (row >= Tn) continue;
    const float2* angles = rope + int64_t(row) * (4 * kN);
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) {
      const float4 cs = *reinterpret_cast<const float4*>(angles + 8 * j + 2 * t);  // columns 2t, 2t + 1
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float c = e ? cs.z : cs.x, sn = e ? cs.w : cs.y;
        const float a = acc[j][2 * hh + e], b = acc[j + kN / 2][2 * hh + e];
        acc[j][2 * hh + e] = a * c + b * sn;
        acc[j + kN / 2][2 * hh + e] = -a * sn + b * c;
      }
    }
  }
}

// ---- forward --------------------------------------------------------------

template <int kD>
struct FwdSmem {
  static constexpr int kStages = Head<kD>::kStages;
  bf16 q[kTile * kD];
  bf16 kv[kStages][2][kTile * kD];  // [stage][K, V]
  uint64_t bars[kStages + 1];       // TMA path (initTileBarriers)
};

// Query head h's Q and its key/value head's K and V (kv_head = h / group)
// in batch b: the columns, pointers and pitches of `lay`.
struct HeadPointers {
  int q_col;
  const bf16* qb;
  int64_t q_pitch;
};
template <int kD>
__device__ __forceinline__ HeadPointers queryHead(const AttnLayout& lay, int group, const bf16* qk, int b, int h,
                                                  int Tn) {
  const int col = lay.qk.q(h, group, kD);
  return {col, qk + int64_t(b) * Tn * lay.qk.width + col, int64_t(lay.qk.width)};
}
__device__ __forceinline__ KvSource kvHead(const AttnLayout& lay, const CUtensorMap& qk_map, const CUtensorMap& v_map,
                                           const bf16* qk, const bf16* v, int b, int kv_head, int Tn) {
  const int k_col = lay.qk.k(kv_head), v_col = lay.v.v(kv_head);
  return {qk_map, v_map, k_col, v_col, qk + int64_t(b) * Tn * lay.qk.width + k_col,
          v + int64_t(b) * Tn * lay.v.width + v_col, int64_t(lay.qk.width), int64_t(lay.v.width)};
}

// grid: x = b * H + h, y = query tile counted from the last (longest first).
// kWg: products on wgmma (sm_90a) instead of mma.sync, and the tiles copied by
// the TMA (qk_map, v_map: batchedTileMap of qk and v) instead of every
// thread's cp.async. Heads 64 wide fit four blocks per SM, 128 wide two (O
// takes twice the registers, the tiles twice the shared memory).
template <int kD, bool kWg>
__global__ void __launch_bounds__(kThreads, kD == 64 ? 4 : 2)
    attnForwardTc(const __grid_constant__ CUtensorMap qk_map, const __grid_constant__ CUtensorMap v_map, bf16* out,
                  void* lse, int lse_bf16, const bf16* qk, const bf16* v, AttnLayout lay, int Tn, int C, int H,
                  float scale_log2) {
  constexpr int kStages = Head<kD>::kStages, kTileBytes = Head<kD>::kTileBytes;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  checkTileAlignment<kWg>(smem_raw);
  FwdSmem<kD>& sm = *reinterpret_cast<FwdSmem<kD>*>(smem_raw);
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const HeadPointers qh = queryHead<kD>(lay, lay.group, qk, b, h, Tn);
  const KvSource kv = kvHead(lay, qk_map, v_map, qk, v, b, h / lay.group, Tn);
  const uint32_t sq = smemAddr(sm.q);
  const uint32_t skv = smemAddr(sm.kv);
  const int n_tiles = q0 / kTile + 1;  // key tiles 0..q0 (the last is the diagonal)
  const uint32_t bars = smemAddr(sm.bars);

  auto loadKv = [&](int tile) {  // on the TMA path from thread 0 only
    loadKvStage<kD, kWg>(skv, bars, tile, kv, b, Tn);
  };
  if constexpr (kWg) {
    startTmaTiles<kStages>(bars, n_tiles, [&](uint32_t bar) {
      mbarExpectBytes(bar, kTileBytes);
      tmaHeadTile<kD>(sq, qk_map, qh.q_col, q0, b, bar);
    }, loadKv);
  } else {
    loadTileAsync(sq, qh.qb, q0, Tn, qh.q_pitch);
    loadKv(0);
    cpAsyncCommit();
    if (n_tiles > 1) loadKv(1);
    cpAsyncCommit();
  }

  uint32_t qf[4][4];
  AccOf<kD> o;
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int it = 0; it < n_tiles; ++it) {
    if constexpr (kWg) {
      awaitTmaTile<kStages>(bars, it, [&] {
        if (threadIdx.x == 0 && it + kStages - 1 < n_tiles) loadKv(it + kStages - 1);
      });
    } else {
      cpAsyncWait<1>();      // tile `it` has landed (its group is the second newest)
      __syncthreads();       // ...for every thread; and every warp is done with tile it - 1,
      if (it + 2 < n_tiles) loadKv(it + 2);  // whose stage is refilled here
      cpAsyncCommit();
    }
    if (!kWg && it == 0) loadRowFrags(qf, sq, warp * 16);
    const uint32_t sk = skv + (it % kStages) * 2 * kTileBytes, sv = sk + kTileBytes;

    Acc s;
    if constexpr (kWg) {
      wgmmaFence();
      wgTileTimesTileT<kD>(s, sq, sk);
      wgCommitWait();
      wgmmaFenceOperands(s);
    } else {
      fragsTimesTileT(s, qf, sk);
    }
    const bool diag = it == n_tiles - 1;  // key tile == query tile: mask keys after the row
    // Row maxima on the raw scores (m is in raw units); the scale goes into
    // the exponent's multiply-add.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (diag && 8 * j + 2 * t + (e & 1) > warp * 16 + g + 8 * (e >> 1)) s[j][e] = -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    }
    float corr[2], ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);  // finite: key 0 is visible to every row
      corr[r] = exp2Fast((m[r] - m_new) * scale_log2);
      m[r] = m_new;
      ms[r] = m_new * scale_log2;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2Fast(fmaf(s[j][e], scale_log2, -ms[e >> 1]));
        s[j][e] = p;
        l[e >> 1] += p;
        o[j][e] *= corr[e >> 1];
      }
    }
#pragma unroll
    for (int j = 8; j < Head<kD>::kFrags; ++j)  // a 128-wide head's second half
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] *= corr[e >> 1];
    if constexpr (kWg) {
      uint32_t pa[4][4];
      wgProbsTimesTile(o, s, sv, 0, pa);
      wgCommitWait();
      wgmmaFenceOperands(o);
      wgmmaFenceOperands(pa);
    } else {
      probsTimesTile(o, s, sv);
    }
  }

  // Row sums were kept per lane; the quad holding a row adds them up.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int row0 = q0 + warp * 16;
  bf16* ob = out + int64_t(b) * Tn * C + int64_t(h) * kD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.f / l[r];
#pragma unroll
    for (int j = 0; j < Head<kD>::kFrags; ++j) o[j][2 * r] *= inv, o[j][2 * r + 1] *= inv;
    const int row = row0 + g + 8 * r;
    if (t == 0 && row < Tn)
      storeAny(lse, lse_bf16, (int64_t(b) * H + h) * Tn + row, (m[r] * scale_log2 + log2f(l[r])) * kLn2);
  }
  storeRows(ob, C, row0, Tn, o, 1.f, false);
}

// ---- backward -------------------------------------------------------------

// dK/dV: the block's K and V tiles are read once into register fragments;
// Q and dO tiles (with their lse and delta) stream through the stages.
template <int kD>
struct BwdKvSmem {
  static constexpr int kStages = Head<kD>::kStages;
  bf16 k[kTile * kD];
  bf16 v[kTile * kD];
  bf16 qdo[kStages][2][kTile * kD];  // [stage][Q, dO]
  float lse[kStages][kTile];         // log2-domain lse; +inf past Tn (P = 0)
  float delta[kStages][kTile];
  uint64_t bars[kStages + 1];  // TMA path (initTileBarriers)
};

// grid: x = b * KV + key/value head, y = key tile (the first ones have the
// most work). A block loops over the query heads of its key/value head (the
// group, one head in multi-head attention) and over their query tiles at or
// after its key tile, so dK and dV of a group are summed in registers.
// kMinBlocks: blocks per SM the register allocation must allow (see
// attentionBackwardBlocksPerSm).
// kSplit: the query tile is processed in kSplit column slices, so that S^T
// and dP^T take 64 / kSplit columns of registers (3 blocks per SM need 2 on
// mma.sync; on wgmma, where K and V stay in shared memory, 1 fits).
// kWg: products on wgmma (sm_90a), K and V read from shared memory, tiles
// copied by the TMA (qkv_map, dout_map: batchedTileMap of qkv and dout).
// bias_partial (or null; multi-head only): row b * tiles + key tile of the
// QKV bias gradient's partial sums (3C columns), the K and V parts written
// here. rope (or null): dK rotated back as stored (rotateRowsBack).
// kGrouped: more than one query head per key/value head (lay.group > 1).
// Multi-head attention gets an instantiation of its own, which streams one
// head's query tiles with no division by the tile count: the loop over
// (query head, tile) pairs cost it about 80 us per layer and micro-batch at
// Llama 2 7B's shape (1.3 ms per step of a 4-layer 7B on one H200).
template <int kD, int kMinBlocks, int kSplit, bool kWg, bool kGrouped>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    attnBackwardKvTc(const __grid_constant__ CUtensorMap qk_map, const __grid_constant__ CUtensorMap v_map,
                     const __grid_constant__ CUtensorMap dout_map, bf16* dqkv, const bf16* dout, const bf16* qk,
                     const bf16* v, AttnLayout lay, const float2* rope, const void* lse, int lse_bf16,
                     const float* delta, float* bias_partial, int Tn, int C, int H, float scale, float scale_log2,
                     bool accumulate, Fp8GradOut fp8) {
  constexpr int kStages = Head<kD>::kStages, kTileBytes = Head<kD>::kTileBytes;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  checkTileAlignment<kWg>(smem_raw);
  BwdKvSmem<kD>& sm = *reinterpret_cast<BwdKvSmem<kD>*>(smem_raw);
  // An FP8 gradient's scale, loaded long before the epilogue needs it.
  const float s8 = fp8.rows ? *fp8.w.scale : 0.f;
  const int group = kGrouped ? lay.group : 1;
  const int KV = H / group;
  const int b = blockIdx.x / KV, kv_head = blockIdx.x % KV;
  const int k0 = blockIdx.y * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const KvSource kv = kvHead(lay, qk_map, v_map, qk, v, b, kv_head, Tn);
  const uint32_t sk = smemAddr(sm.k), sv = smemAddr(sm.v), sqdo = smemAddr(sm.qdo);
  const int n_tiles = (Tn - k0 + kTile - 1) / kTile;  // query tiles k0, k0 + 64, ... of each head
  // Streamed tile i: query head kv_head * group + i / n_tiles, its query
  // tile k0 + (i % n_tiles) * 64.
  const int n_streamed = group * n_tiles;
  auto headOf = [&](int i) { return kGrouped ? kv_head * group + i / n_tiles : kv_head; };
  auto rowOf = [&](int i) { return k0 + (kGrouped ? i % n_tiles : i) * kTile; };

  // lse/delta of the next tile travel through registers: loaded when its
  // copies are issued, stored to shared memory after this tile's math.
  float pre_l = 0.f, pre_d = 0.f;
  auto fetchStats = [&](int i) {
    if (threadIdx.x < kTile) {
      const int q = rowOf(i) + threadIdx.x;
      const int64_t stat = (int64_t(b) * H + headOf(i)) * Tn;
      pre_l = q < Tn ? loadAny(lse, lse_bf16, stat + q) * kLog2e : INFINITY;
      pre_d = q < Tn ? delta[stat + q] : 0.f;
    }
  };
  auto putStats = [&](int stage) {
    if (threadIdx.x < kTile) sm.lse[stage][threadIdx.x] = pre_l, sm.delta[stage][threadIdx.x] = pre_d;
  };

  const uint32_t bars = smemAddr(sm.bars);
  auto loadQdo = [&](int i) {  // streamed tile i into its stage
    const uint32_t st = sqdo + (i % kStages) * 2 * kTileBytes;
    const int h = headOf(i), row = rowOf(i);
    if constexpr (kWg) {  // thread 0 only
      const uint32_t bar = bars + 8 * (i % kStages);
      mbarExpectBytes(bar, 2 * kTileBytes);
      tmaHeadTile<kD>(st, qk_map, lay.qk.q(h, group, kD), row, b, bar);
      tmaHeadTile<kD>(st + kTileBytes, dout_map, h * kD, row, b, bar);
    } else {
      static_assert(kWg || kD == 64, "heads 128 wide run on wgmma only");
      const HeadPointers qh = queryHead<kD>(lay, group, qk, b, h, Tn);
      loadTileAsync(st, qh.qb, row, Tn, qh.q_pitch);
      loadTileAsync(st + kTileBytes, dout + int64_t(b) * Tn * C + int64_t(h) * kD, row, Tn, C);
    }
  };
  if constexpr (kWg) {
    initTileBarriers<kStages>(bars);
    if (threadIdx.x == 0) {
      mbarExpectBytes(bars + 8 * kStages, 2 * kTileBytes);
      tmaHeadTile<kD>(sk, qk_map, kv.k_col, k0, b, bars + 8 * kStages);
      tmaHeadTile<kD>(sv, v_map, kv.v_col, k0, b, bars + 8 * kStages);
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i)
        if (i < n_streamed) loadQdo(i);
    }
  } else {
    loadTileAsync(sk, kv.kb, k0, Tn, kv.k_pitch);
    loadTileAsync(sv, kv.vb, k0, Tn, kv.v_pitch);
    loadQdo(0);
    cpAsyncCommit();
  }
  fetchStats(0);
  putStats(0);
  if (kStages > 2 && n_streamed > 1) {  // with two stages tile 1 comes with the loop's first refill
    if constexpr (!kWg) loadQdo(1);
    fetchStats(1);
    putStats(1);
  }
  if constexpr (kWg)
    __syncthreads();  // the barriers are initialised, the first stats stored
  else
    cpAsyncCommit();

  uint32_t kf[4][4], vf[4][4];
  AccOf<kD> dk, dv;
  zero(dk);
  zero(dv);
  constexpr int kAhead = kStages - 1;  // tiles in flight while one is used
  for (int it = 0; it < n_streamed; ++it) {
    const bool refill = it + kAhead < n_streamed;
    if constexpr (kWg) {
      awaitTmaTile<kStages>(bars, it, [&] {
        if (refill && threadIdx.x == 0) loadQdo(it + kAhead);
        if (refill) fetchStats(it + kAhead);
      });
    } else {
      cpAsyncWait<1>();    // tile `it` has landed (its group is the second newest)
      __syncthreads();     // ...for every thread; and every warp is done with tile it - 1
      if (refill) {
        loadQdo(it + kAhead);
        fetchStats(it + kAhead);
      }
      cpAsyncCommit();
    }
    if (!kWg && it == 0) {
      loadRowFrags(kf, sk, warp * 16);
      loadRowFrags(vf, sv, warp * 16);
    }
    const int stage = it % kStages;
    const uint32_t sq = sqdo + stage * 2 * kTileBytes, sg = sq + kTileBytes;
    const bool diag = kGrouped ? it % n_tiles == 0 : it == 0;  // query tile == key tile: mask queries before the key
#pragma unroll
    for (int part = 0; part < kSplit; ++part) {
      constexpr int kF = 8 / kSplit;  // 8-column fragments per slice
      const int col0 = part * 8 * kF;
      // Both products complete before the arithmetic. Letting dP^T run beside
      // P^T's exponentials (as the dQ kernel does) and dV beside dS^T needs
      // more than the 168 registers of 3 blocks per SM (ptxas then
      // serializes the products); at 2 blocks per SM (190 registers) the
      // attention backward took 3.88-3.93 ms per GPT-2 step against 3.54.
      float s[kF][4], dp[kF][4];  // S^T and dP^T: rows are the warp's 16 keys, columns the slice's queries
      if constexpr (kWg) {
        wgmmaFence();
        wgTileTimesTileT<kD>(s, sk, sq, col0);
        wgTileTimesTileT<kD>(dp, sv, sg, col0);
        wgCommitWait();
        wgmmaFenceOperands(s);
        wgmmaFenceOperands(dp);
      } else {
        fragsTimesTileT(s, kf, sq, col0);
        fragsTimesTileT(dp, vf, sg, col0);
      }
#pragma unroll
      for (int j = 0; j < kF; ++j) {
        const int c = col0 + 8 * j + 2 * t;
        const float2 ls = *reinterpret_cast<const float2*>(&sm.lse[stage][c]);
        const float2 de = *reinterpret_cast<const float2*>(&sm.delta[stage][c]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = exp2Fast(fmaf(s[j][e], scale_log2, -((e & 1) ? ls.y : ls.x)));
          if (diag && c + (e & 1) < warp * 16 + g + 8 * (e >> 1)) p = 0.f;
          s[j][e] = p;
          dp[j][e] = p * (dp[j][e] - ((e & 1) ? de.y : de.x));
        }
      }
      if constexpr (kWg) {
        uint32_t pa[kF / 2][4], da[kF / 2][4];
        wgProbsTimesTile(dv, s, sg, col0, pa);   // dV += P^T dO
        wgProbsTimesTile(dk, dp, sq, col0, da);  // dK += dS^T Q
        wgCommitWait();
        wgmmaFenceOperands(dv);
        wgmmaFenceOperands(dk);
        wgmmaFenceOperands(pa);
        wgmmaFenceOperands(da);
      } else {
        probsTimesTile(dv, s, sg, col0);   // dV += P^T dO
        probsTimesTile(dk, dp, sq, col0);  // dK += dS^T Q
      }
    }
    if (refill) putStats((it + kAhead) % kStages);
  }
  if (rope) rotateRowsBack(dk, rope, k0 + warp * 16, Tn);
  if (fp8.rows) {
    const int64_t token0 = int64_t(b) * Tn;
    const float m = storeRowsFp8(fp8, lay.grad.width, lay.grad.k(kv_head), token0, k0 + warp * 16, Tn, dk, scale, s8);
    finishFp8Grad(fp8, fmaxf(m, storeRowsFp8(fp8, lay.grad.width, lay.grad.v(kv_head), token0, k0 + warp * 16, Tn, dv,
                                             1.f, s8)),
                  s8);
  } else {
    bf16* db = dqkv + int64_t(b) * Tn * lay.grad.width;
    storeRows(db + lay.grad.k(kv_head), lay.grad.width, k0 + warp * 16, Tn, dk, scale, accumulate);
    storeRows(db + lay.grad.v(kv_head), lay.grad.width, k0 + warp * 16, Tn, dv, 1.f, accumulate);
  }
  if (bias_partial) {
    cpAsyncWait<0>();
    float* row = bias_partial + (int64_t(b) * gridDim.y + blockIdx.y) * 3 * C + int64_t(kv_head) * kD;
    float* red = reinterpret_cast<float*>(sm.qdo);
    tileColumnSums(row + C, dk, scale, k0 + warp * 16, Tn, red);
    tileColumnSums(row + 2 * int64_t(C), dv, 1.f, k0 + warp * 16, Tn, red);
  }
}

// dQ: the block's Q and dO tiles are read once into register fragments; K
// and V tiles stream through the stages.
template <int kD>
struct BwdQSmem {
  static constexpr int kStages = Head<kD>::kStages;
  bf16 q[kTile * kD];
  bf16 g[kTile * kD];
  bf16 kv[kStages][2][kTile * kD];  // [stage][K, V]
  uint64_t bars[kStages + 1];       // TMA path (initTileBarriers)
};

// grid: x = b * H + h, y = query tile counted from the last (longest first).
// kWg: products on wgmma (sm_90a), Q and dO read from shared memory, tiles
// copied by the TMA (as in attnBackwardKvTc).
// bias_partial (or null): as in attnBackwardKvTc, the Q part written here;
// rope (or null): dQ rotated back as stored.
template <int kD, int kMinBlocks, bool kWg>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    attnBackwardQTc(const __grid_constant__ CUtensorMap qk_map, const __grid_constant__ CUtensorMap v_map,
                    const __grid_constant__ CUtensorMap dout_map, bf16* dqkv, const bf16* dout, const bf16* qk,
                    const bf16* v, AttnLayout lay, const float2* rope, const bf16* out, const void* lse,
                    int lse_bf16, float* delta, float* bias_partial, int Tn, int C, int H, float scale,
                    float scale_log2, bool accumulate, Fp8GradOut fp8) {
  constexpr int kStages = Head<kD>::kStages, kTileBytes = Head<kD>::kTileBytes;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  checkTileAlignment<kWg>(smem_raw);
  BwdQSmem<kD>& sm = *reinterpret_cast<BwdQSmem<kD>*>(smem_raw);
  const float s8 = fp8.rows ? *fp8.w.scale : 0.f;  // an FP8 gradient's scale, loaded early
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const HeadPointers qh = queryHead<kD>(lay, lay.group, qk, b, h, Tn);
  const KvSource kv = kvHead(lay, qk_map, v_map, qk, v, b, h / lay.group, Tn);
  const bf16* gb = dout + int64_t(b) * Tn * C + int64_t(h) * kD;
  const int64_t stat = (int64_t(b) * H + h) * Tn;
  const uint32_t sq = smemAddr(sm.q), sg = smemAddr(sm.g), skv = smemAddr(sm.kv);
  const int n_tiles = q0 / kTile + 1;
  const uint32_t bars = smemAddr(sm.bars);

  auto loadKv = [&](int tile) {  // on the TMA path from thread 0 only
    loadKvStage<kD, kWg>(skv, bars, tile, kv, b, Tn);
  };
  if constexpr (kWg) {
    startTmaTiles<kStages>(bars, n_tiles, [&](uint32_t bar) {
      mbarExpectBytes(bar, 2 * kTileBytes);
      tmaHeadTile<kD>(sq, qk_map, qh.q_col, q0, b, bar);
      tmaHeadTile<kD>(sg, dout_map, h * kD, q0, b, bar);
    }, loadKv);
  } else {
    loadTileAsync(sq, qh.qb, q0, Tn, qh.q_pitch);
    loadTileAsync(sg, gb, q0, Tn, C);
    loadKv(0);
    cpAsyncCommit();
    if (n_tiles > 1) loadKv(1);
    cpAsyncCommit();
  }

  const int row0 = q0 + warp * 16;
  // delta = rowsum(dO * O) of the warp's 16 rows, two lanes per row (half
  // the columns each), while the first tiles load. The dK/dV kernel,
  // launched after this one, reads it from `delta`.
  float my_delta = 0.f;
  {
    const int q = row0 + (lane >> 1);
    if (q < Tn) {
      const int64_t off = (int64_t(b) * Tn + q) * C + int64_t(h) * kD + (lane & 1) * (kD / 2);
#pragma unroll
      for (int v = 0; v < kD / 16; ++v) {
        const uint4 gv = *reinterpret_cast<const uint4*>(dout + off + 8 * v);
        const uint4 ov = *reinterpret_cast<const uint4*>(out + off + 8 * v);
        const __nv_bfloat162* ge = reinterpret_cast<const __nv_bfloat162*>(&gv);
        const __nv_bfloat162* oe = reinterpret_cast<const __nv_bfloat162*>(&ov);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 a = __bfloat1622float2(ge[e]), c = __bfloat1622float2(oe[e]);
          my_delta = fmaf(a.x, c.x, my_delta);
          my_delta = fmaf(a.y, c.y, my_delta);
        }
      }
    }
    my_delta += __shfl_xor_sync(0xffffffffu, my_delta, 1);
    if ((lane & 1) == 0 && q < Tn) delta[stat + q] = my_delta;
  }
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = row0 + g + 8 * r;
    lse2[r] = q < Tn ? loadAny(lse, lse_bf16, stat + q) * kLog2e : INFINITY;
    dl[r] = __shfl_sync(0xffffffffu, my_delta, 2 * (g + 8 * r));  // lane 2i holds row i's delta
  }

  uint32_t qf[4][4], gf[4][4];
  AccOf<kD> dq;
  zero(dq);
  for (int it = 0; it < n_tiles; ++it) {
    if constexpr (kWg) {
      awaitTmaTile<kStages>(bars, it, [&] {
        if (threadIdx.x == 0 && it + kStages - 1 < n_tiles) loadKv(it + kStages - 1);
      });
    } else {
      cpAsyncWait<1>();
      __syncthreads();
      if (it + 2 < n_tiles) loadKv(it + 2);
      cpAsyncCommit();
    }
    if (!kWg && it == 0) {
      loadRowFrags(qf, sq, warp * 16);
      loadRowFrags(gf, sg, warp * 16);
    }
    const uint32_t sk = skv + (it % kStages) * 2 * kTileBytes, sv = sk + kTileBytes;

    Acc s, dp;
    if constexpr (kWg) {  // dP's product runs beside P's exponentials
      wgmmaFence();
      wgTileTimesTileT<kD>(s, sq, sk);   // S = Q K^T
      wgmmaCommit();
      wgTileTimesTileT<kD>(dp, sg, sv);  // dP = dO V^T
      wgmmaCommit();
      wgmmaWait<1>();  // S has landed; dP may still run
      wgmmaFenceOperands(s);
    } else {
      fragsTimesTileT(s, qf, sk);   // S = Q K^T
      fragsTimesTileT(dp, gf, sv);  // dP = dO V^T
    }
    const bool diag = it == n_tiles - 1;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2Fast(fmaf(s[j][e], scale_log2, -lse2[e >> 1]));
        if (diag && 8 * j + 2 * t + (e & 1) > warp * 16 + g + 8 * (e >> 1)) p = 0.f;
        s[j][e] = p;
      }
    }
    if constexpr (kWg) {
      wgmmaWait<0>();
      wgmmaFenceOperands(dp);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - dl[e >> 1]);
    if constexpr (kWg) {
      uint32_t da[4][4];
      wgProbsTimesTile(dq, dp, sk, 0, da);  // dQ += dS K
      wgCommitWait();
      wgmmaFenceOperands(dq);
      wgmmaFenceOperands(da);
    } else {
      probsTimesTile(dq, dp, sk);  // dQ += dS K
    }
  }
  if (rope) rotateRowsBack(dq, rope, row0, Tn);
  if (fp8.rows) {
    finishFp8Grad(fp8,
                  storeRowsFp8(fp8, lay.grad.width, lay.grad.q(h, lay.group, kD), int64_t(b) * Tn, row0, Tn, dq, scale,
                               s8),
                  s8);
  } else {
    storeRows(dqkv + int64_t(b) * Tn * lay.grad.width + lay.grad.q(h, lay.group, kD), lay.grad.width, row0, Tn, dq,
              scale, accumulate);
  }
  if (bias_partial) {
    cpAsyncWait<0>();
    const int tile = q0 / kTile;
    tileColumnSums(bias_partial + (int64_t(b) * gridDim.y + tile) * 3 * C + int64_t(h) * kD, dq, scale, row0, Tn,
                   reinterpret_cast<float*>(sm.kv));
  }
}

}  // namespace

static bool& useWgmma();

// Heads 64 wide on either instruction set; 128 wide on wgmma only (the
// mma.sync kernels keep K and V fragments of a whole head in registers).
bool attentionTensorCoreEligible(int64_t C, int64_t H, DType dt) {
  if (dt != DType::BF16 || H <= 0 || C % H != 0 || C % 8 != 0) return false;
  return C / H == 64 || (C / H == 128 && useWgmma());
}

// Blocks per SM for the two backward kernels. At 2 every fragment stays in
// registers (dK/dV 242, dQ 221 per thread); at 3 they are capped at 168 for
// 12 warps per SM instead of 8: the dQ kernel fits as it is, the dK/dV
// kernel fits by taking each query tile in two 32-column slices (kSplit 2;
// unsplit it spilled about 200 bytes). GPT-2 124M step on one H200:
// 30.25 ms with 2,2, 30.01 with 2,3, 30.55 with 3,3 unsplit (one call);
// 30.81 / 30.78 with 2,3 against 30.52 / 30.51 with 3,3 split (another
// call, alternating; attention backward 4.93 -> 4.54 ms). On wgmma the
// dK/dV kernel reads K and V from shared memory and fits 3 blocks per SM
// unsplit (168 registers, no spills), its products m64n64 instead of
// m64n32: attention backward 3.56 / 3.59 ms per step against 3.79 / 3.82
// split (one H200, GPT-2 124M, --breakdown, alternating). The default is
// 3,3. TANDEM_ATTN_BWD_BLOCKS="KV,Q" (each 2 or 3) overrides it.
struct BackwardBlocks {
  int kv = 3, q = 3;
};
static BackwardBlocks attentionBackwardBlocksPerSm() {
  static const BackwardBlocks blocks = [] {
    BackwardBlocks b;
    const char* env = std::getenv("TANDEM_ATTN_BWD_BLOCKS");
    if (env == nullptr || *env == 0) return b;
    const std::string v(env);
    const bool ok = v.size() == 3 && v[1] == ',' && (v[0] == '2' || v[0] == '3') && (v[2] == '2' || v[2] == '3');
    if (!ok)
      throw std::runtime_error("TANDEM_ATTN_BWD_BLOCKS must be KV,Q with each 2 or 3 (e.g. 2,3), not '" + v + "'");
    b.kv = v[0] - '0';
    b.q = v[2] - '0';
    return b;
  }();
  return blocks;
}

// Which instructions the products use. wgmma where this build carries the
// sm_90a code and the device loaded it (a probe kernel from the same module
// says so), else mma.sync; TANDEM_ATTN_MMA=wgmma|sync overrides (wgmma
// where it is missing is an error).
__global__ void probeWgmma(int* out) { *out = TANDEM_WGMMA_COMPILED; }

bool wgmmaCodeLoaded() {
  int* flag = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  probeWgmma<<<1, 1>>>(flag);
  int host = 0;
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t copied = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
  TANDEM_CUDA_CHECK(cudaFree(flag));
  TANDEM_CUDA_CHECK(launched);
  TANDEM_CUDA_CHECK(copied);
  return host == 1;
}

static bool& useWgmma() {
  static bool use = false;
  return use;
}

static void chooseAttentionMma() {
  const bool loaded = wgmmaCodeLoaded();
  const char* env = std::getenv("TANDEM_ATTN_MMA");
  const std::string v = env == nullptr ? "" : env;
  if (v.empty()) {
    useWgmma() = loaded;
  } else if (v == "sync") {
    useWgmma() = false;
  } else if (v == "wgmma") {
    if (!loaded)
      throw std::runtime_error(
          "TANDEM_ATTN_MMA=wgmma: this build or device has no sm_90a attention kernels (build for CUDA "
          "architecture 90 and run on compute capability 9.0)");
    useWgmma() = true;
  } else {
    throw std::runtime_error("TANDEM_ATTN_MMA must be wgmma or sync, not '" + v + "'");
  }
}

const char* attentionMmaPath() { return useWgmma() ? "wgmma" : "mma.sync"; }

template <typename Kernel>
static void allowSmem(Kernel kernel, size_t bytes) {
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <bool kWg>
static void allowAttentionSmem() {
  allowSmem(attnForwardTc<64, kWg>, sizeof(FwdSmem<64>));
  for (const auto kernel : {attnBackwardKvTc<64, 2, 1, kWg, false>, attnBackwardKvTc<64, 2, 1, kWg, true>,
                            attnBackwardKvTc<64, 3, kWg ? 1 : 2, kWg, false>, attnBackwardKvTc<64, 3, kWg ? 1 : 2, kWg, true>})
    allowSmem(kernel, sizeof(BwdKvSmem<64>));
  allowSmem(attnBackwardQTc<64, 2, kWg>, sizeof(BwdQSmem<64>));
  allowSmem(attnBackwardQTc<64, 3, kWg>, sizeof(BwdQSmem<64>));
}

// Heads 128 wide: two blocks per SM for every kernel (the shared tiles of
// two stages fill about 100 KiB per block); the dK/dV kernel takes each query
// tile in two 32-column slices so that dK and dV (64 registers each) and the
// slice's S^T and dP^T stay in registers.
constexpr int kWideSplit = 2;
const auto attnForwardWide = attnForwardTc<128, true>;
const auto attnBackwardKvWide = attnBackwardKvTc<128, 2, kWideSplit, true, false>;
const auto attnBackwardKvWideGrouped = attnBackwardKvTc<128, 2, kWideSplit, true, true>;
const auto attnBackwardQWide = attnBackwardQTc<128, 2, true>;

void prepareAttentionKernels() {
  allowAttentionSmem<false>();
  allowAttentionSmem<true>();
  allowSmem(attnForwardWide, sizeof(FwdSmem<128>));
  allowSmem(attnBackwardKvWide, sizeof(BwdKvSmem<128>));
  allowSmem(attnBackwardKvWideGrouped, sizeof(BwdKvSmem<128>));
  allowSmem(attnBackwardQWide, sizeof(BwdQSmem<128>));
  attentionBackwardBlocksPerSm();  // a bad override fails here, before any step
  chooseAttentionMma();
}

// The TMA's view of a [B, Tn, cols] bf16 tensor on the wgmma path; the
// mma.sync kernels take their tiles with cp.async and get an unused map.
static const CUtensorMap& headTiles(const void* p, int64_t B, int64_t Tn, int64_t cols) {
  static const CUtensorMap unused{};
  return useWgmma() ? batchedTileMap(p, B, Tn, cols) : unused;
}

AttnLayout multiHeadLayout(int64_t C, int64_t H) {
  const HeadCols cols{int(3 * C), int(C / H), int(C), int(2 * C)};
  return {cols, cols, cols, 1};
}

// The layout's key/value heads: H / group, a whole number.
static int64_t kvHeads(const AttnLayout& lay, int64_t H) {
  if (lay.group <= 0 || H % lay.group != 0)
    throw CudaError("attention: " + std::to_string(H) + " query heads do not form groups of " +
                    std::to_string(lay.group));
  return H / lay.group;
}

void attentionForwardTc(void* out, void* lse, DType lse_dt, const TcAttention& in, int64_t B, int64_t Tn, int64_t C,
                        int64_t H, cudaStream_t s) {
  kvHeads(in.layout, H);
  dim3 grid(unsigned(B * H), unsigned((Tn + kTile - 1) / kTile));
  const bool wide = C / H == 128;
  const auto kernel = wide ? attnForwardWide : useWgmma() ? attnForwardTc<64, true> : attnForwardTc<64, false>;
  const size_t smem = wide ? sizeof(FwdSmem<128>) : sizeof(FwdSmem<64>);
  kernel<<<grid, kThreads, smem, s>>>(headTiles(in.qk, B, Tn, in.layout.qk.width),
                                      headTiles(in.v, B, Tn, in.layout.v.width), static_cast<bf16*>(out), lse,
                                      isBf16(lse_dt), static_cast<const bf16*>(in.qk),
                                      static_cast<const bf16*>(in.v), in.layout, int(Tn), int(C), int(H),
                                      kLog2e / sqrtf(float(C / H)));
  TANDEM_CUDA_LAUNCH_CHECK();
}

// The dK/dV instantiation for heads `wide` (128) or 64 wide at `blocks` per SM.
template <bool kGrouped>
static auto kvBackwardKernel(bool wide, int blocks, bool wg) {
  if (wide) return kGrouped ? attnBackwardKvWideGrouped : attnBackwardKvWide;
  if (blocks == 3) return wg ? attnBackwardKvTc<64, 3, 1, true, kGrouped> : attnBackwardKvTc<64, 3, 2, false, kGrouped>;
  return wg ? attnBackwardKvTc<64, 2, 1, true, kGrouped> : attnBackwardKvTc<64, 2, 1, false, kGrouped>;
}

void attentionBackwardTc(void* dqkv, const void* dout, const TcAttention& in, const void* out, const void* lse,
                         DType lse_dt, float* delta, float* bias_partial, int64_t B, int64_t Tn, int64_t C, int64_t H,
                         bool accumulate, cudaStream_t s, const Fp8GradOut& fp8) {
  const int64_t KV = kvHeads(in.layout, H);
  if (bias_partial && in.layout.group != 1)
    throw CudaError("attention backward: a bias gradient needs multi-head attention's layout");
  if (fp8.rows && (bias_partial || accumulate || Tn % 4 != 0 || fp8.tokens != B * Tn || !fp8.cols || !fp8.w.scale ||
                   !fp8.w.amax || !fp8.w.scale_inv))
    throw CudaError("attention backward: an FP8 gradient is written whole, in both layouts, of sequences a multiple "
                    "of 4 long, with no bias gradient beside it");
  dim3 grid(unsigned(B * H), unsigned((Tn + kTile - 1) / kTile));
  dim3 kv_grid(unsigned(B * KV), grid.y);
  const float scale = 1.f / sqrtf(float(C / H));
  const BackwardBlocks blocks = attentionBackwardBlocksPerSm();
  const bool wg = useWgmma(), wide = C / H == 128;
  const auto kv_kernel = in.layout.group == 1 ? kvBackwardKernel<false>(wide, blocks.kv, wg)
                                              : kvBackwardKernel<true>(wide, blocks.kv, wg);
  const auto q_kernel = wide ? attnBackwardQWide
                             : blocks.q == 3 ? (wg ? attnBackwardQTc<64, 3, true> : attnBackwardQTc<64, 3, false>)
                                             : (wg ? attnBackwardQTc<64, 2, true> : attnBackwardQTc<64, 2, false>);
  const size_t q_smem = wide ? sizeof(BwdQSmem<128>) : sizeof(BwdQSmem<64>);
  const size_t kv_smem = wide ? sizeof(BwdKvSmem<128>) : sizeof(BwdKvSmem<64>);
  const CUtensorMap& qk_map = headTiles(in.qk, B, Tn, in.layout.qk.width);
  const CUtensorMap& v_map = headTiles(in.v, B, Tn, in.layout.v.width);
  const CUtensorMap& dout_map = headTiles(dout, B, Tn, C);
  const auto* qk = static_cast<const bf16*>(in.qk);
  const auto* v = static_cast<const bf16*>(in.v);
  // dQ first: it writes the delta the dK/dV kernel reads.
  q_kernel<<<grid, kThreads, q_smem, s>>>(qk_map, v_map, dout_map, static_cast<bf16*>(dqkv),
                                          static_cast<const bf16*>(dout), qk, v, in.layout, in.rope,
                                          static_cast<const bf16*>(out), lse, isBf16(lse_dt), delta, bias_partial,
                                          int(Tn), int(C), int(H), scale, scale * kLog2e, accumulate, fp8);
  TANDEM_CUDA_LAUNCH_CHECK();
  kv_kernel<<<kv_grid, kThreads, kv_smem, s>>>(qk_map, v_map, dout_map, static_cast<bf16*>(dqkv),
                                               static_cast<const bf16*>(dout), qk, v, in.layout, in.rope, lse,
                                               isBf16(lse_dt), delta, bias_partial, int(Tn), int(C), int(H), scale,
                                               scale * kLog2e, accumulate, fp8);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
