// The fc layer's two GEMMs with GELU epilogues on Hopper's wgmma (sm_90a):
//   forward   pre = x W^T + bias, y = gelu(pre)     x [M,K], W [N,K], pre, y [M,N]
//   backward  dx = (dy W) * gelu'(pre)              dy [M,N], W [N,K], pre, dx [M,K]
// cuBLASLt has both epilogues (GELU_AUX_BIAS, DGELU), but on GPT-2's fc
// shapes its fused kernels take 37 and 43 us more than the same GEMMs
// without them (146 / 132 against 108 / 89 us, one H200, bench_gelu_gemm):
// 0.95 ms per step. These kernels are the start of an own GEMM that hides
// the epilogue; not yet faster, so cuBLASLt stays the default (gemm_gelu.h).
//
// Persistent, one block per SM, output tiles of 128 x 256 in row-major
// order, the contraction in k-tiles of 64. Warp-specialized: one thread of a
// producer warp streams the k-tiles into shared-memory stages with the Tensor
// Memory Accelerator (cp.async.bulk.tensor, 128-byte swizzle), each stage's
// mbarrier counting the bytes that landed; two consumer warpgroups (64 rows
// each) wait for a stage, issue its m64n256k16 wgmmas (wgmma.cuh), keep them
// in flight while they wait for the next stage, and give a stage back once
// its products are done, so the producer runs on into the next tile while
// they finish this one. Epilogue: fragments into shared memory in the layout
// of a TMA box (64 columns x 128 rows, 128-byte swizzle), stored by one
// thread with the TMA. The backward's W tile is MN-major (the output index
// runs along its rows): one product spans its four 64-column swizzle atoms;
// its pre tile comes in with the k-tiles into a region of its own, and dx
// leaves from the same place.
//
// Measured (bench_gelu_gemm, one H200, forward / backward, us):
//   128 x 128 tiles, two blocks per SM, every thread loading with cp.async
//     and a block-wide barrier per k-tile                          179 / 209
//     (stalled on the barrier; the L2 at 54% of its throughput)
//   the same with one producer warp issuing cp.async                253 / 319
//   the same with a TMA producer                                    161 / 164
//   128 x 256, one block per SM, staged stores                      182 / 190
//   persistent, stores straight from the fragments                  272 / 177
//   persistent, TMA stores (4 / 3 stages)                           148 / 166
//   the same, stages and phases as counters (this file)             151 / 162
//   persistent, a whole tile staged (2 stages; the stores then hold
//     up the next tile's loads)                                     214 / 219
//   the forward's main loop alone, no epilogue: 2 / 3 / 4 stages    105 / 93 / 86
// The products run faster than cuBLASLt's (86 us for what takes it 108
// with a bias epilogue); the epilogue is what is left: writing 64 KiB per
// output and tile takes the consumers off the tensor cores for about as
// long as the TMA needs to drain a buffer. Next: a consumer warpgroup pair
// that alternates tiles (one's epilogue beside the other's products).
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes through cudaGetDriverEntryPointByVersion

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "engine/cuda/cp_async.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/gemm_gelu.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/wgmma.cuh"

namespace tandem::cuda {
namespace {

constexpr int kBlockRows = 128, kBlockCols = 256, kDepth = 64;
constexpr int kConsumerThreads = 256;                  // two warpgroups
constexpr int kThreads = kConsumerThreads + 32;        // + the producer warp
// The forward keeps four stages and two 16 KiB staging buffers for its
// stores (three stages and four buffers: 196 us, ptxas spilling); the
// backward three stages and its pre tile (64 KiB).
constexpr int kForwardStages = 4, kBackwardStages = 3;
constexpr int kStagingBuffers = 2;
constexpr uint32_t kOperandBytes = 128 * 128;        // A: 128 rows of 128 bytes, 16 KiB
constexpr uint32_t kStageBytes = 3 * kOperandBytes;  // A and B (256 rows): 48 KiB
constexpr uint32_t kChunkBytes = 128 * 128;          // 64 output columns x 128 rows, bf16: 16 KiB
constexpr uint32_t kTileBytes = 128 * 256 * 2;       // a bf16 output tile: 64 KiB
// Stages, then the forward's staging buffers or the backward's pre tile,
// then the mbarriers; + room to align.
constexpr size_t smemBytes(bool forward) {
  return (forward ? kForwardStages : kBackwardStages) * kStageBytes +
         (forward ? kStagingBuffers * kChunkBytes : kTileBytes) + 128 + 1024;
}

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

// ---- mbarriers (shared memory, CTA scope) ----------------------------------

__device__ __forceinline__ void mbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// The arrival of a TMA issuer that announces the bytes still to land.
__device__ __forceinline__ void mbarExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Waits until the phase with the given parity has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
// The consumers' own barrier (named barrier 1): the producer warp never joins.
__device__ __forceinline__ void consumersSync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
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

// The staging of a 128 x 256 bf16 output tile: four quarters of 64
// columns, each 128 rows of 128 bytes in the 128-byte swizzle (the layout the
// TMA writes the backward's pre tile in), so that both the fragment accesses
// (8 rows x 4 lanes) and the row reads are free of bank conflicts. Piece p
// (0..31) of a row is its columns 8p..8p+7.
__device__ __forceinline__ uint32_t stageAt(int row, int piece) {
  return uint32_t((piece >> 3) * 16384 + row * 128 + (((piece & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpackBf16x2(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
}

// Persistent: one block per SM walks the tiles blockIdx.x, + gridDim.x, ...
// in row-major order (the blocks at work on one row of tiles share its A
// rows in L2). The producer runs ahead into the next tile while the
// consumers finish the last one: the epilogue's buffers lie outside the
// stages, so those stay free for it.
//
// Tensor maps (boxes of 64 columns x `rows` rows, 128-byte swizzle): a over
// x or dy (128 rows); b over W (forward: 256 rows of W[N,K]; backward: 64
// rows of W[N,K], four boxes side by side); pre over GELU's input (128 rows,
// four boxes side by side; the backward only).
template <bool kForward, int kStages = kForward ? kForwardStages : kBackwardStages>
__global__ void __launch_bounds__(kThreads, 1)
    geluGemmKernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_pre, const __grid_constant__ CUtensorMap map_out,
                   Args args) {
#if TANDEM_WGMMA_COMPILED
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // wgmma's swizzle repeats on 1024-byte boundaries
  unsigned char* const base_ptr = smem_raw + (base - raw);
  // After the stages: the forward's staging buffers, or the backward's pre tile.
  const uint32_t pre_tile = base + kStages * kStageBytes, staging = pre_tile;
  const uint32_t full = pre_tile + (kForward ? kStagingBuffers * kChunkBytes : kTileBytes), empty = full + 8 * kStages;
  const uint32_t pre_full = empty + 8 * kStages, pre_empty = pre_full + 8;
  const int k_tiles = args.depth / kDepth;
  const int col_tiles = args.cols / kBlockCols;
  const int tiles = args.rows / kBlockRows * col_tiles;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarInit(full + 8 * s, 1);   // the producer's arrival with the bytes it expects
      mbarInit(empty + 8 * s, 2);  // one thread per consumer warpgroup
    }
    if (!kForward) mbarInit(pre_full, 1), mbarInit(pre_empty, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {  // the producer warp: one thread issues
    if (threadIdx.x != kConsumerThreads) return;
    // The stage of the next k-tile, and whether its stage has been used
    // before (then the parity of the consumers' last release of it).
    int stage = 0, uses = 0;
    uint32_t parity = 0;
    int round = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++round) {
      const int row0 = tile / col_tiles * kBlockRows, col0 = tile % col_tiles * kBlockCols;
      for (int t = 0; t < k_tiles; ++t) {
        if (uses >= kStages) mbarWait(empty + 8 * stage, parity);
        const uint32_t st = base + uint32_t(stage) * kStageBytes, bar = full + 8 * stage;
        mbarExpectBytes(bar, kStageBytes);
        tmaLoad(st, map_a, t * kDepth, row0, bar);
        if constexpr (kForward) {
          tmaLoad(st + kOperandBytes, map_b, t * kDepth, col0, bar);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) tmaLoad(st + kOperandBytes + q * 8192u, map_b, col0 + 64 * q, t * kDepth, bar);
        }
        // The backward's pre tile once the tile's first k-tiles are on their
        // way and the consumers are done with the last one.
        if (!kForward && t == (k_tiles < kStages ? k_tiles - 1 : kStages - 1)) {
          if (round > 0) mbarWait(pre_empty, uint32_t(round - 1) & 1u);
          mbarExpectBytes(pre_full, kTileBytes);
#pragma unroll
          for (int q = 0; q < 4; ++q) tmaLoad(pre_tile + q * 16384u, map_pre, col0 + 64 * q, row0, pre_full);
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

  const int wg = threadIdx.x >> 7;
  // Fragment (j, e) of this thread: row r0 (+8 for e >= 2), columns 8j + 2t, +1.
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int r0 = wg * 64 + ((threadIdx.x >> 5) & 3) * 16 + g;
  // The stage of the next k-tile and the parity of its use, kept as
  // counters (no division by the stage count in the loop).
  int stage = 0, prev_stage = kStages - 1;
  uint32_t parity = 0;
  int round = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++round) {
    const int64_t row0 = tile / col_tiles * kBlockRows;
    const int col0 = tile % col_tiles * kBlockCols;
    // No zeroing: each tile's first wgmma overwrites (scale-d 0), and a
    // fitting shape has at least one k-tile.
    float acc[32][4];
    for (int kt = 0; kt < k_tiles; ++kt) {
      mbarWait(full + 8 * stage, parity);
      const uint32_t a = base + uint32_t(stage) * kStageBytes + uint32_t(wg) * 8192u;
      const uint32_t b = base + uint32_t(stage) * kStageBytes + kOperandBytes;
      wgmmaFence();
#pragma unroll
      for (int kc = 0; kc < kDepth / 16; ++kc) {
        const uint64_t da = wgmmaDesc(a + kc * 32);
        const int accumulate = kt > 0 || kc > 0;
        if constexpr (kForward)
          wgmmaSS256(acc, da, wgmmaDesc(b + kc * 32), accumulate);
        else
          wgmmaSS256T(acc, da, wgmmaDescLbo(b + kc * 2048, 8192), accumulate);
      }
      wgmmaCommit();
      // This k-tile's products stay in flight; the previous one's are done,
      // and its stage goes back to the producer. (No register pinning here:
      // any non-wgmma instruction that names the accumulators while products
      // are in flight makes ptxas serialize them.)
      wgmmaWait<1>();
      if (kt > 0 && (threadIdx.x & 127) == 0) mbarArrive(empty + 8 * prev_stage);
      prev_stage = stage;
      if (++stage == kStages) stage = 0, parity ^= 1u;
    }
    wgmmaWait<0>();
    wgmmaFenceOperands(acc);
    if ((threadIdx.x & 127) == 0) mbarArrive(empty + 8 * prev_stage);

    // The epilogue: fragments into shared memory in the layout of a TMA
    // box (64 columns x 128 rows, 128-byte swizzle), which one thread then
    // stores with the TMA while the consumers move on.
    if constexpr (kForward) {
      // pre and y, a quarter (64 columns) at a time through the buffers in
      // turn (unrolled: the accumulators must be indexed by constants).
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int q = c & 3;
        const bool is_y = c >= 4;
        const uint32_t buf = staging + uint32_t(c % kStagingBuffers) * kChunkBytes;
        if (threadIdx.x == 0) bulkWaitRead<kStagingBuffers - 1>();  // this buffer's last store has read it
        consumersSync();
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
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            float v0 = acc[j][2 * h] + b0, v1 = acc[j][2 * h + 1] + b1;
            if (is_y) v0 = gelu(v0), v1 = gelu(v1);
            *reinterpret_cast<uint32_t*>(base_ptr + (buf - base) + stageAt(r, jj) + 4 * t4) = packBf16x2(v0, v1);
          }
        }
        fenceProxyAsync();
        consumersSync();
        if (threadIdx.x == 0) {
          tmaStore(is_y ? map_out : map_pre, buf, col0 + 64 * q, int(row0));
          bulkCommit();
        }
      }
    } else {
      mbarWait(pre_full, uint32_t(round) & 1u);
      unsigned char* const stage = base_ptr + (pre_tile - base);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t at = stageAt(r0 + 8 * h, j) + 4 * t4;
          const float2 x = unpackBf16x2(*reinterpret_cast<const uint32_t*>(stage + at));
          *reinterpret_cast<uint32_t*>(stage + at) =
              packBf16x2(acc[j][2 * h] * geluGrad(x.x), acc[j][2 * h + 1] * geluGrad(x.y));
        }
      }
      fenceProxyAsync();
      consumersSync();  // dx is in place of the pre tile
      if (threadIdx.x == 0) {
#pragma unroll
        for (int q = 0; q < 4; ++q) tmaStore(map_out, pre_tile + q * 16384u, col0 + 64 * q, int(row0));
        bulkCommit();
        bulkWaitRead<0>();  // the tile's region may take the next pre tile
        mbarArrive(pre_empty);
      }
    }
  }
  if (threadIdx.x == 0) bulkWaitAll();  // the stores are done before the block leaves
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

// cuTensorMapEncodeTiled from the driver the runtime loaded (never linked:
// the binaries must start where there is no driver).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        p == nullptr || status != cudaDriverEntryPointSuccess)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (needed by the own GELU GEMM)");
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A bf16 row-major matrix [rows, cols] in boxes of 64 columns x box_rows
// rows. Encoded once per (pointer, shape, box): the executor's tensors keep
// their addresses for the whole run.
const CUtensorMap& tensorMap(const void* ptr, int64_t rows, int64_t cols, int box_rows) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int64_t, int64_t, int>, CUtensorMap> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(ptr, rows, cols, box_rows);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ") for a " +
                             std::to_string(rows) + " x " + std::to_string(cols) + " bf16 matrix");
  return cache.emplace(key, map).first->second;
}

int smCount() {
  static const int n = [] {
    int dev = 0, sms = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&dev));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }();
  return n;
}

template <bool kForward>
void launch(const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& pre, const CUtensorMap& out,
            const Args& args, cudaStream_t s) {
  const int64_t tiles = int64_t(args.rows / kBlockRows) * (args.cols / kBlockCols);
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, smCount()));
  geluGemmKernel<kForward><<<blocks, kThreads, smemBytes(kForward), s>>>(a, b, pre, out, args);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void prepareGeluGemm() {
  PathState& st = state();
  if (!st.prepared) {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(geluGemmKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smemBytes(true))));
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(geluGemmKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smemBytes(false))));
    st.loaded = wgmmaCodeLoaded();
    st.prepared = true;
  }
  const char* env = std::getenv("TANDEM_GELU_GEMM");
  const std::string v = env == nullptr ? "" : env;
  if (v.empty() || v == "cublaslt") {
    st.path = GeluGemmPath::CublasLt;
  } else if (v == "own") {
    if (!st.loaded)
      throw std::runtime_error(
          "TANDEM_GELU_GEMM=own: this build or device has no sm_90a GELU GEMM (build for CUDA architecture 90 and "
          "run on compute capability 9.0)");
    st.path = GeluGemmPath::Own;
  } else {
    throw std::runtime_error("TANDEM_GELU_GEMM must be own or cublaslt, not '" + v + "'");
  }
}

bool ownGeluGemmLoaded() { return state().loaded; }
GeluGemmPath geluGemmPath() { return state().path; }
void setGeluGemmPath(GeluGemmPath path) {
  if (path == GeluGemmPath::Own && !state().loaded)
    throw std::runtime_error("the own GELU GEMM needs the sm_90a code on a compute capability 9.0 device");
  state().path = path;
}

bool ownGeluGemmFits(int64_t rows, int64_t cols, int64_t depth) {
  return rows > 0 && cols > 0 && depth > 0 && rows % kBlockRows == 0 && cols % kBlockCols == 0 &&
         depth % kDepth == 0 && rows < (int64_t(1) << 30) && cols < (int64_t(1) << 30) &&
         depth < (int64_t(1) << 30) && (rows / kBlockRows) * (cols / kBlockCols) < (int64_t(1) << 30);
}

bool useOwnGeluGemm(int64_t rows, int64_t cols, int64_t depth, std::initializer_list<const void*> pointers) {
  if (state().path != GeluGemmPath::Own || !ownGeluGemmFits(rows, cols, depth)) return false;
  for (const void* p : pointers)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

void geluGemmForwardOwn(void* y, void* pre, const void* x, const void* W, const void* bias, int64_t M, int64_t N,
                        int64_t K, cudaStream_t s) {
  const Args args{static_cast<bf16*>(y), static_cast<bf16*>(pre), static_cast<const bf16*>(x),
                  static_cast<const bf16*>(W), static_cast<const bf16*>(bias), int(M), int(N), int(K)};
  launch<true>(tensorMap(x, M, K, 128), tensorMap(W, N, K, 256), tensorMap(pre, M, N, 128), tensorMap(y, M, N, 128),
               args, s);
}

void geluGemmBackwardOwn(void* dx, const void* dy, const void* W, const void* pre, int64_t M, int64_t N, int64_t K,
                         cudaStream_t s) {
  const Args args{static_cast<bf16*>(dx), static_cast<bf16*>(const_cast<void*>(pre)), static_cast<const bf16*>(dy),
                  static_cast<const bf16*>(W), nullptr, int(M), int(K), int(N)};
  launch<false>(tensorMap(dy, M, N, 128), tensorMap(W, N, K, 64), tensorMap(pre, M, K, 128), tensorMap(dx, M, K, 128),
                args, s);
}

}  // namespace tandem::cuda
