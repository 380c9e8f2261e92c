// The fc layer's two GEMMs with GELU epilogues on Hopper's wgmma (sm_90a):
//   forward   pre = x W^T + bias, y = gelu(pre)     x [M,K], W [N,K], pre, y [M,N]
//   backward  dx = (dy W) * gelu'(pre)              dy [M,N], W [N,K], pre, dx [M,K]
// cuBLASLt has both epilogues (GELU_AUX_BIAS, DGELU), but on GPT-2's fc
// shapes its fused kernels take 37 and 43 us more than the same GEMMs
// without them (146 / 132 against 108 / 89 us, one H200, bench_gelu_gemm):
// 0.95 ms per step, because each block stores its tile while the tensor
// cores wait. Ours hides the epilogue better: forward 122 us (24 us under
// cuBLASLt's), backward 136 (4 over; gemm_gelu.h says which runs).
//
// Persistent, one block per SM; the block's output tiles (128 x 128) are
// blockIdx.x, + gridDim.x, ... in row-major order, and its two consumer
// warpgroups take them in turn (ping-pong): while one multiplies a tile, the
// other writes its last one out. One thread of a producer warp streams the
// k-tiles (64 deep) of the tiles in order into five shared-memory stages
// with the Tensor Memory Accelerator (cp.async.bulk.tensor, 128-byte
// swizzle), each stage's mbarrier counting the bytes that landed; the
// multiplying warpgroup waits for a stage, issues its m64n128k16 wgmmas
// (wgmma.cuh) for both 64-row halves, keeps them in flight while it waits
// for the next stage, and gives a stage back once its products are done.
// Epilogue: fragments into the warpgroup's own region of shared memory in
// the layout of a TMA box (64 columns x 128 rows), stored by its thread 0
// with the TMA. The backward's W tile is MN-major (the output index runs
// along its rows): one product spans its two 64-column swizzle atoms; its
// pre tile comes into the warpgroup's region, and dx leaves from there.
//
// Measured before (bench_gelu_gemm, one H200, forward / backward, us):
//   128 x 128 tiles, two blocks per SM, every thread loading with cp.async
//     and a block-wide barrier per k-tile                          179 / 209
//   the same with one producer warp issuing cp.async                253 / 319
//   the same with a TMA producer                                    161 / 164
//   128 x 256 tiles, both warpgroups on one tile, one block per SM:
//     staged 16-byte stores                                         182 / 190
//     persistent, stores straight from the fragments                272 / 177
//     persistent, TMA stores                                        151 / 162
//     persistent, a whole tile staged (2 stages)                    214 / 219
//     the forward's products alone, no epilogue, 2 / 3 / 4 stages   105 / 93 / 86
//   ping-pong, four stages, the turn passed after the last products
//     completed                                                     129 / 142
//   ping-pong, five stages, the turn passed once the last products
//     are issued                                                    122 / 139
//   the same, the backward's wait for its last dx store moved from
//     its epilogue to its next turn (this file)                     123 / 136

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/cuda/cp_async.cuh"
#include "engine/cuda/device.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gemm_gelu.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/mbarrier.cuh"
#include "engine/cuda/tensor_map.h"
#include "engine/cuda/wgmma.cuh"

namespace tandem::cuda {
namespace {

constexpr int kTileRows = 128, kTileCols = 128, kDepth = 64;  // one warpgroup's output tile
constexpr int kConsumerThreads = 256;                  // two warpgroups
constexpr int kThreads = kConsumerThreads + 32;        // + the producer warp
constexpr int kStages = 5;  // 160 KiB: with the epilogue regions, 225 of the 227 KiB a block may have
constexpr uint32_t kOperandBytes = 128 * 128;          // 128 rows of 128 bytes: 16 KiB
constexpr uint32_t kStageBytes = 2 * kOperandBytes;    // A and B: 32 KiB
constexpr uint32_t kChunkBytes = 128 * 128;            // 64 output columns x 128 rows, bf16: 16 KiB
constexpr uint32_t kWgBytes = 2 * kChunkBytes;         // each warpgroup's epilogue region: 32 KiB
// Stages, the two warpgroups' epilogue regions, the mbarriers; + room to align.
constexpr size_t kSmemBytes = kStages * kStageBytes + 2 * kWgBytes + 128 + 1024;

struct Args {
  bf16* out;          // y (forward) or dx (backward), [M, cols]
  bf16* pre;          // GELU's input, [M, cols]: written by the forward, read by the backward
  const bf16* a;      // x or dy, [M, depth]
  const bf16* b;      // W: forward [cols, depth], backward [depth, cols]
  const bf16* bias;   // forward only; may be null
  int rows, cols, depth;
};

__device__ __forceinline__ float tanhFast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanhFast(kGeluK * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float geluGrad(float x) {
  const float t = tanhFast(kGeluK * (x + 0.044715f * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluK * (1.f + 3.f * 0.044715f * x * x);
}

// ---- the Tensor Memory Accelerator ---------------------------------------

// Box (x, y) of a 2-D tensor map from shared memory at src (the issuing
// thread's bulk group; the writers fenced for the async proxy before).
__device__ __forceinline__ void tmaStore(const CUtensorMap& map, uint32_t src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(x), "r"(y), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulkCommit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups still read shared memory.
template <int N>
__device__ __forceinline__ void bulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Until all of this thread's bulk groups are complete.
__device__ __forceinline__ void bulkWaitAll() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Box (x, y) of a 2-D tensor map into shared memory at dst; its bytes count
// towards the mbarrier's expected transaction.
__device__ __forceinline__ void tmaLoad(uint32_t dst, const CUtensorMap& map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// The staging of a 128 x 128 bf16 output tile: two halves of 64 columns,
// each 128 rows of 128 bytes in the 128-byte swizzle (the layout of a TMA
// box), so that both the fragment accesses (8 rows x 4 lanes) and the row
// reads are free of bank conflicts. Piece p (0..15) of a row is its
// columns 8p..8p+7.
__device__ __forceinline__ uint32_t stageAt(int row, int piece) {
  return uint32_t((piece >> 3) * 16384 + row * 128 + (((piece & 7) ^ (row & 7)) << 4));
}

// Warpgroup w's own barrier (named barriers 2 and 3).
__device__ __forceinline__ void warpgroupSync(int w) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(2 + w) : "memory");
}

__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpackBf16x2(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
}

// Persistent, one block per SM: the block's tiles are blockIdx.x, +
// gridDim.x, ... in row-major order (blocks at work on one row of tiles share
// its A rows in L2), and its two consumer warpgroups take them in turn
// (ping-pong): while one multiplies a tile, the other stores its last one.
// A pair of mbarriers passes the tensor cores from one warpgroup to the
// other after each main loop.
//
// Tensor maps (boxes of 64 columns x `rows` rows, 128-byte swizzle): a over
// x or dy (128 rows); b over W (forward: 128 rows of W[N,K]; backward: 64
// rows of W[N,K], two boxes side by side); pre and out over GELU's input and
// the output (128 rows; the backward loads pre, the forward stores it).
template <bool kForward>
__global__ void __launch_bounds__(kThreads, 1)
    geluGemmKernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_pre, const __grid_constant__ CUtensorMap map_out,
                   Args args) {
#if TANDEM_WGMMA_COMPILED
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // wgmma's swizzle repeats on 1024-byte boundaries
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const uint32_t regions = base + kStages * kStageBytes;  // warpgroup w's at regions + w * kWgBytes
  const uint32_t full = regions + 2 * kWgBytes, empty = full + 8 * kStages;
  const uint32_t turn = empty + 8 * kStages;             // two: warpgroup w may multiply
  const uint32_t pre_full = turn + 16;                   // two: warpgroup w's pre tile landed (backward)
  const int k_tiles = args.depth / kDepth;
  const int col_tiles = args.cols / kTileCols;
  const int tiles = args.rows / kTileRows * col_tiles;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarInit(full + 8 * s, 1);   // the producer's arrival with the bytes it expects
      mbarInit(empty + 8 * s, 1);  // the consuming warpgroup's thread 0
    }
    for (int w = 0; w < 2; ++w) {
      mbarInit(turn + 8 * w, 1);
      mbarInit(pre_full + 8 * w, 1);
    }
    fenceMbarrierInit();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {  // the producer warp: one thread issues
    if (threadIdx.x != kConsumerThreads) return;
    int stage = 0, uses = 0;
    uint32_t parity = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int row0 = tile / col_tiles * kTileRows, col0 = tile % col_tiles * kTileCols;
      for (int t = 0; t < k_tiles; ++t) {
        if (uses >= kStages) mbarWait(empty + 8 * stage, parity);
        const uint32_t st = base + uint32_t(stage) * kStageBytes, bar = full + 8 * stage;
        mbarExpectBytes(bar, kStageBytes);
        tmaLoad(st, map_a, t * kDepth, row0, bar);
        if constexpr (kForward) {
          tmaLoad(st + kOperandBytes, map_b, t * kDepth, col0, bar);
        } else {
          tmaLoad(st + kOperandBytes, map_b, col0, t * kDepth, bar);
          tmaLoad(st + kOperandBytes + 8192u, map_b, col0 + 64, t * kDepth, bar);
        }
        ++uses;
        if (++stage == kStages) {
          stage = 0;
          if (uses > kStages) parity ^= 1u;
        }
      }
    }
    return;
  }

  const int wg = threadIdx.x >> 7, wt = threadIdx.x & 127;
  // Fragment (j, e) of this thread in each 64-row half: row r0 (+8 for
  // e >= 2), columns 8j + 2t, +1.
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int r0 = ((threadIdx.x >> 5) & 3) * 16 + g;
  const uint32_t region = regions + uint32_t(wg) * kWgBytes;
  unsigned char* const region_ptr = base_ptr + (region - base);
  // The backward's pre tile comes into the warpgroup's region by the TMA,
  // issued by the warpgroup's thread 0 when the tensor cores come to it for
  // the tile (the region's last dx tile read out by then): it lands during
  // the main loop, and the producer never waits for an epilogue.
  auto loadPre = [&](int tile) {
    if (kForward || wt != 0 || tile >= tiles) return;
    const int row0 = tile / col_tiles * kTileRows, col0 = tile % col_tiles * kTileCols;
    const uint32_t pbar = pre_full + 8 * wg;
    mbarExpectBytes(pbar, kWgBytes);
    tmaLoad(region, map_pre, col0, row0, pbar);
    tmaLoad(region + kChunkBytes, map_pre, col0 + 64, row0, pbar);
  };
  loadPre(blockIdx.x + wg * gridDim.x);
  int n = 0;  // this warpgroup's tiles so far
  for (int i = wg, tile = blockIdx.x + wg * gridDim.x; tile < tiles; i += 2, tile += 2 * gridDim.x, ++n) {
    const int64_t row0 = tile / col_tiles * kTileRows;
    const int col0 = tile % col_tiles * kTileCols;
    // The k-tiles of the block's tiles before this one went through the
    // stages first.
    const int first = i * k_tiles;
    int stage = first % kStages;
    uint32_t parity = uint32_t(first / kStages) & 1u;
    // Wait for the other warpgroup's main loop to end (the first tile of
    // warpgroup 0 waits for nothing).
    if (wg == 1) mbarWait(turn + 8, uint32_t(n) & 1u);
    else if (n > 0) mbarWait(turn, uint32_t(n - 1) & 1u);
    // The backward's next pre tile: its region's last dx tile has been read
    // out by now (the other warpgroup's main loop ran meanwhile), so the
    // wait is short here, where at the end of the epilogue it could hold up
    // this warpgroup's next turn (the kernel measured 2-3 us faster); the tile
    // lands during this main loop.
    if (!kForward && n > 0) {
      if (wt == 0) bulkWaitRead<0>();
      loadPre(tile);
    }
    // No zeroing: each tile's first wgmma overwrites (scale-d 0), and a
    // fitting shape has at least one k-tile.
    float lo[16][4], hi[16][4];  // rows 0..63 and 64..127
    int prev_stage = 0;
    for (int kt = 0; kt < k_tiles; ++kt) {
      mbarWait(full + 8 * stage, parity);
      const uint32_t a = base + uint32_t(stage) * kStageBytes;
      const uint32_t b = a + kOperandBytes;
      wgmmaFence();
#pragma unroll
      for (int kc = 0; kc < kDepth / 16; ++kc) {
        const int accumulate = kt > 0 || kc > 0;
        const uint64_t db = kForward ? wgmmaDesc(b + kc * 32) : wgmmaDescLbo(b + kc * 2048, 8192);
        if constexpr (kForward) {
          wgmmaSS128(lo, wgmmaDesc(a + kc * 32), db, accumulate);
          wgmmaSS128(hi, wgmmaDesc(a + 8192 + kc * 32), db, accumulate);
        } else {
          wgmmaSS128T(lo, wgmmaDesc(a + kc * 32), db, accumulate);
          wgmmaSS128T(hi, wgmmaDesc(a + 8192 + kc * 32), db, accumulate);
        }
      }
      wgmmaCommit();
      // This k-tile's products stay in flight; the previous one's are done,
      // and its stage goes back to the producer. (No register pinning here:
      // any non-wgmma instruction that names the accumulators while products
      // are in flight makes ptxas serialize them.)
      wgmmaWait<1>();
      if (kt > 0 && wt == 0) mbarArrive(empty + 8 * prev_stage);
      prev_stage = stage;
      if (++stage == kStages) stage = 0, parity ^= 1u;
    }
    // The tensor cores to the other warpgroup as soon as this one's last
    // products are issued: its first products queue behind them, and the
    // drain below is no bubble.
    if (wt == 0) mbarArrive(turn + 8 * (wg ^ 1));
    wgmmaWait<0>();
    wgmmaFenceOperands(lo);
    wgmmaFenceOperands(hi);
    if (wt == 0) mbarArrive(empty + 8 * prev_stage);

    // The epilogue, beside the other warpgroup's main loop: fragments into
    // this warpgroup's region in the layout of a TMA box, stored by its
    // thread 0 with the TMA.
    if constexpr (kForward) {
      // pre, then y, each as two 64-column halves through the region's two
      // buffers (unrolled: the accumulators must be indexed by constants).
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int q = c & 1;
        const bool is_y = c >= 2;
        const uint32_t buf = region + uint32_t(q) * kChunkBytes;
        if (wt == 0) bulkWaitRead<1>();  // this buffer's last store has read it
        warpgroupSync(wg);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const int j = 8 * q + jj;
          const int col = col0 + 8 * j + 2 * t4;
          float b0 = 0.f, b1 = 0.f;
          if (args.bias != nullptr) {
            const float2 bb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(args.bias + col));
            b0 = bb.x, b1 = bb.y;
          }
#pragma unroll
          for (int h = 0; h < 4; ++h) {  // rows r0, r0 + 8 of lo, then of hi
            const float* f = h < 2 ? lo[j] : hi[j];
            const int r = r0 + 8 * (h & 1) + (h < 2 ? 0 : 64);
            float v0 = f[2 * (h & 1)] + b0, v1 = f[2 * (h & 1) + 1] + b1;
            if (is_y) v0 = gelu(v0), v1 = gelu(v1);
            *reinterpret_cast<uint32_t*>(base_ptr + (buf - base) + stageAt(r, jj) + 4 * t4) = packBf16x2(v0, v1);
          }
        }
        fenceProxyAsync();
        warpgroupSync(wg);
        if (wt == 0) {
          tmaStore(is_y ? map_out : map_pre, buf, col0 + 64 * q, int(row0));
          bulkCommit();
        }
      }
    } else {
      mbarWait(pre_full + 8 * wg, uint32_t(n) & 1u);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const float* f = h < 2 ? lo[j] : hi[j];
          const int r = r0 + 8 * (h & 1) + (h < 2 ? 0 : 64);
          const uint32_t at = stageAt(r, j) + 4 * t4;
          const float2 x = unpackBf16x2(*reinterpret_cast<const uint32_t*>(region_ptr + at));
          *reinterpret_cast<uint32_t*>(region_ptr + at) =
              packBf16x2(f[2 * (h & 1)] * geluGrad(x.x), f[2 * (h & 1) + 1] * geluGrad(x.y));
        }
      }
      fenceProxyAsync();
      warpgroupSync(wg);  // dx is in place of the pre tile
      if (wt == 0) {
        tmaStore(map_out, region, col0, int(row0));
        tmaStore(map_out, region + kChunkBytes, col0 + 64, int(row0));
        bulkCommit();
      }
    }
  }
  if (wt == 0) bulkWaitAll();  // the stores are done before the block leaves
#else
  (void)map_a, (void)map_b, (void)map_pre, (void)map_out, (void)args;
  __trap();
#endif
}

struct PathState {
  bool prepared = false, loaded = false;
  GeluGemmPath path = GeluGemmPath::CublasLt;
};
PathState& state() {
  static PathState s;
  return s;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <bool kForward>
void launch(const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& pre, const CUtensorMap& out,
            const Args& args, cudaStream_t s) {
  const int64_t tiles = int64_t(args.rows / kTileRows) * (args.cols / kTileCols);
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, smCount()));
  geluGemmKernel<kForward><<<blocks, kThreads, kSmemBytes, s>>>(a, b, pre, out, args);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void prepareGeluGemm() {
  PathState& st = state();
  if (!st.prepared) {
    for (const auto kernel : {geluGemmKernel<true>, geluGemmKernel<false>})
      TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    st.loaded = wgmmaCodeLoaded();
    st.prepared = true;
  }
  // Default `forward` where the sm_90a code runs, cuBLASLt elsewhere: our
  // forward is 24 us faster per GPT-2 layer than GELU_AUX_BIAS on one
  // H200, our backward 4 us slower than DGELU (bench_gelu_gemm), and
  // whole steps gain 0.1-0.3 ms (docs/benchmarks.md, sixteenth session).
  const char* env = std::getenv("TANDEM_GELU_GEMM");
  const std::string v = env == nullptr ? "" : env;
  if (v.empty()) {
    st.path = st.loaded ? GeluGemmPath::OwnForward : GeluGemmPath::CublasLt;
  } else if (v == "cublaslt") {
    st.path = GeluGemmPath::CublasLt;
  } else if (v == "own" || v == "forward") {
    if (!st.loaded)
      throw std::runtime_error("TANDEM_GELU_GEMM=" + v +
                               ": this build or device has no sm_90a GELU GEMM (build for CUDA architecture 90 and "
                               "run on compute capability 9.0)");
    st.path = v == "own" ? GeluGemmPath::Own : GeluGemmPath::OwnForward;
  } else {
    throw std::runtime_error("TANDEM_GELU_GEMM must be forward, own or cublaslt, not '" + v + "'");
  }
}

bool ownGeluGemmLoaded() { return state().loaded; }
void setGeluGemmPath(GeluGemmPath path) {
  if (path != GeluGemmPath::CublasLt && !state().loaded)
    throw std::runtime_error("the own GELU GEMM needs the sm_90a code on a compute capability 9.0 device");
  state().path = path;
}

bool ownGeluGemmFits(int64_t rows, int64_t cols, int64_t depth) {
  return rows > 0 && cols > 0 && depth > 0 && rows % kTileRows == 0 && cols % kTileCols == 0 &&
         depth % kDepth == 0 && rows < (int64_t(1) << 30) && cols < (int64_t(1) << 30) &&
         depth < (int64_t(1) << 30) && (rows / kTileRows) * (cols / kTileCols) < (int64_t(1) << 30);
}

bool useOwnGeluGemm(bool forward, int64_t rows, int64_t cols, int64_t depth,
                    std::initializer_list<const void*> pointers) {
  const GeluGemmPath path = state().path;
  const bool chosen = path == GeluGemmPath::Own || (forward && path == GeluGemmPath::OwnForward);
  if (!chosen || !ownGeluGemmFits(rows, cols, depth)) return false;
  for (const void* p : pointers)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

void geluGemmForwardOwn(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M, int64_t N,
                        int64_t K, cudaStream_t s) {
  const Args args{static_cast<bf16*>(y), static_cast<bf16*>(pre), static_cast<const bf16*>(x),
                  static_cast<const bf16*>(W), static_cast<const bf16*>(bias), int(M), int(N), int(K)};
  launch<true>(matrixTileMap(x, M, K, 128), matrixTileMap(W, N, K, 128), matrixTileMap(pre, M, N, 128),
               matrixTileMap(y, M, N, 128), args, s);
}

void geluGemmBackwardOwn(void* dx, const void* dy, const void* W, const void* pre, int64_t M, int64_t N, int64_t K,
                         cudaStream_t s) {
  const Args args{static_cast<bf16*>(dx), static_cast<bf16*>(const_cast<void*>(pre)), static_cast<const bf16*>(dy),
                  static_cast<const bf16*>(W), nullptr, int(M), int(K), int(N)};
  launch<false>(matrixTileMap(dy, M, N, 128), matrixTileMap(W, N, K, 64), matrixTileMap(pre, M, K, 128),
                matrixTileMap(dx, M, K, 128), args, s);
}

}  // namespace tandem::cuda
