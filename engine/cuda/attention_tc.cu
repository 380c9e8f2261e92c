// Causal attention on the tensor cores (bf16, head dimension 64), flash
// style: 64x64 tiles, one warp per 16 rows, scores in fp32, probabilities
// rounded to bf16 only as matrix-unit operands. Never stores T x T.
//
// Backward in two kernels so every output element has one writer (no
// atomics, deterministic): dK/dV per key tile looping over query tiles, dQ
// per query tile looping over key tiles; both rebuild P from the forward's
// log-sum-exp.
#include <mma.h>

#include <cmath>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

using namespace nvcuda;

constexpr int D = 64;
constexpr int kTile = 64;    // rows of queries and keys per tile
constexpr int kWarps = 4;    // 16 rows each
constexpr int kLdH = D + 8;  // bf16 row pitch (144 bytes: 32-byte aligned 16-row blocks)
constexpr int kLdS = kTile + 4;  // fp32 row pitch of score tiles
constexpr float kLog2e = 1.4426950408889634f;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct FwdSmem {
  bf16 k[kTile][kLdH];  // first holds Q while each warp takes its rows into fragments
  bf16 v[kTile][kLdH];
  float s[kWarps][16][kLdS];
  bf16 p[kWarps][16][kLdH];
};

// The warp's own 16 rows of the tiles that stay fixed for the whole loop
// (K and V, or Q and dO) live in registers as A fragments; the shared tiles
// hold only the streamed operands, so three blocks fit on an SM.
struct BwdSmem {
  bf16 c[kTile][kLdH];   // the tile streamed per iteration (Q or K)
  bf16 d[kTile][kLdH];   // (dO or V)
  float s[kWarps][16][kLdS];
  float dp[kWarps][16][kLdS];
  bf16 p[kWarps][16][kLdH];
  bf16 ds[kWarps][16][kLdH];
  float lse[kTile];
  float delta[kTile];
};

// Loads rows [row0, row0 + 64) of a [*, stride] bf16 matrix (columns
// [col, col + 64)) into a padded tile; rows past `rows` are zero.
__device__ __forceinline__ void loadTile(bf16 (*tile)[kLdH], const bf16* base, int row0, int rows,
                                         int64_t stride, int64_t col) {
  for (int e = threadIdx.x; e < kTile * (D / 8); e += blockDim.x) {
    int r = e / (D / 8), c8 = e % (D / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(base + (row0 + r) * stride + col + c8 * 8);
    *reinterpret_cast<uint4*>(&tile[r][c8 * 8]) = v;
  }
}

using RowFrags = FragA[D / 16];

// Loads rows [row, row + 16) of a shared tile into A fragments.
__device__ __forceinline__ void loadRowFrags(RowFrags& f, const bf16 (*x)[kLdH], int row) {
#pragma unroll
  for (int i = 0; i < D / 16; ++i) wmma::load_matrix_sync(f[i], &x[row][i * 16], kLdH);
}

// acc[n] = A[16][0:D] * Y[n*16.., 0:D]^T with A held in fragments.
__device__ __forceinline__ void fragsTimesTileT(FragC (&acc)[4], const RowFrags& a, const bf16 (*y)[kLdH]) {
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
  for (int i = 0; i < D / 16; ++i) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      FragBCol bfr;
      wmma::load_matrix_sync(bfr, &y[n * 16][i * 16], kLdH);
      wmma::mma_sync(acc[n], a[i], bfr, acc[n]);
    }
  }
}

// acc[n] += P[16][0:64] * Y[0:64][n*16..]   (P in a per-warp bf16 tile)
__device__ __forceinline__ void probsTimesTile(FragC (&acc)[4], const bf16 (*p)[kLdH], const bf16 (*y)[kLdH]) {
#pragma unroll
  for (int kk = 0; kk < kTile; kk += 16) {
    FragA a;
    wmma::load_matrix_sync(a, &p[0][kk], kLdH);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      FragBRow bfr;
      wmma::load_matrix_sync(bfr, &y[kk][n * 16], kLdH);
      wmma::mma_sync(acc[n], a, bfr, acc[n]);
    }
  }
}

__global__ void __launch_bounds__(128) attnForwardTc(bf16* out, void* lse, int lse_bf16, const bf16* qkv, int Tn,
                                                     int C, int H, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  FwdSmem& sm = *reinterpret_cast<FwdSmem*>(smem_raw);
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane >> 1, half = lane & 1;
  const int64_t stride = 3 * int64_t(C);
  const bf16* base = qkv + int64_t(b) * Tn * stride;
  const int qi = q0 + warp * 16 + r;
  loadTile(sm.k, base, q0, Tn, stride, int64_t(h) * D);  // Q, taken into fragments
  __syncthreads();
  RowFrags qa;
  loadRowFrags(qa, sm.k, warp * 16);
  float m = -INFINITY, l = 0.f, o[D / 2];
#pragma unroll
  for (int j = 0; j < D / 2; ++j) o[j] = 0.f;
  const int kv_end = min(Tn, q0 + kTile);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    loadTile(sm.k, base, k0, Tn, stride, C + int64_t(h) * D);
    loadTile(sm.v, base, k0, Tn, stride, 2 * int64_t(C) + int64_t(h) * D);
    __syncthreads();
    FragC acc[4];
    fragsTimesTileT(acc, qa, sm.k);
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], acc[n], kLdS, wmma::mem_row_major);
    __syncwarp();
    float sv[32], mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = half * 32 + j, key = k0 + c;
      float v = sm.s[warp][r][c] * scale;
      if (key > qi || key >= Tn) v = -INFINITY;
      sv[j] = v;
      mx = fmaxf(mx, v);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float corr = (m == -INFINITY) ? 0.f : expf(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float p = (sv[j] == -INFINITY) ? 0.f : expf(sv[j] - m_new);
      psum += p;
      sm.p[warp][r][half * 32 + j] = __float2bfloat16_rn(p);
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l = l * corr + psum;
    m = m_new;
#pragma unroll
    for (int j = 0; j < D / 2; ++j) o[j] *= corr;
    __syncwarp();
    FragC pv[4];
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::fill_fragment(pv[n], 0.f);
    probsTimesTile(pv, sm.p[warp], sm.v);
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], pv[n], kLdS, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < D / 2; ++j) o[j] += sm.s[warp][r][half * (D / 2) + j];
    __syncwarp();
  }
  if (qi < Tn) {
    const float inv = 1.f / l;
    bf16* orow = out + (int64_t(b) * Tn + qi) * C + int64_t(h) * D + half * (D / 2);
#pragma unroll
    for (int j = 0; j < D / 2; ++j) orow[j] = __float2bfloat16_rn(o[j] * inv);
    if (half == 0) storeAny(lse, lse_bf16, (int64_t(b) * H + h) * Tn + qi, m + logf(l));
  }
}

// Writes a warp's 16 x 64 fp32 result (staged in `stage`) to rows of dqkv.
__device__ __forceinline__ void writeRows(bf16* dqkv, const float (*stage)[kLdS], int row0, int Tn, int64_t stride,
                                          int64_t col, float scale, bool accumulate) {
  const int lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const int row = row0 + r;
  if (row >= Tn) return;
  bf16* dst = dqkv + row * stride + col + half * (D / 2);
#pragma unroll
  for (int j = 0; j < D / 2; ++j) {
    float v = stage[r][half * (D / 2) + j] * scale;
    if (accumulate) v += __bfloat162float(dst[j]);
    dst[j] = __float2bfloat16_rn(v);
  }
}

__global__ void __launch_bounds__(128) attnBackwardKvTc(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                                        const void* lse, int lse_bf16, const float* delta, int Tn,
                                                        int C, int H, float scale, bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  BwdSmem& sm = *reinterpret_cast<BwdSmem*>(smem_raw);
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  const int64_t stride = 3 * int64_t(C);
  const bf16* base = qkv + int64_t(b) * Tn * stride;
  const bf16* dbase = dout + int64_t(b) * Tn * C;
  const int64_t stat = (int64_t(b) * H + h) * Tn;
  const float scale_log2 = scale * kLog2e;
  loadTile(sm.c, base, k0, Tn, stride, C + int64_t(h) * D);              // K
  loadTile(sm.d, base, k0, Tn, stride, 2 * int64_t(C) + int64_t(h) * D);  // V
  __syncthreads();
  RowFrags ka, va;
  loadRowFrags(ka, sm.c, warp * 16);
  loadRowFrags(va, sm.d, warp * 16);
  FragC dk[4], dv[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(dk[n], 0.f), wmma::fill_fragment(dv[n], 0.f);
  for (int q0 = k0; q0 < Tn; q0 += kTile) {
    __syncthreads();
    loadTile(sm.c, base, q0, Tn, stride, int64_t(h) * D);  // Q
    loadTile(sm.d, dbase, q0, Tn, C, int64_t(h) * D);      // dO
    if (threadIdx.x < kTile) {
      const int qi = q0 + threadIdx.x;
      sm.lse[threadIdx.x] = qi < Tn ? loadAny(lse, lse_bf16, stat + qi) : 0.f;
      sm.delta[threadIdx.x] = qi < Tn ? delta[stat + qi] : 0.f;
    }
    __syncthreads();
    FragC acc[4];
    fragsTimesTileT(acc, ka, sm.c);  // S^T = K Q^T
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], acc[n], kLdS, wmma::mem_row_major);
    fragsTimesTileT(acc, va, sm.d);  // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.dp[warp][0][n * 16], acc[n], kLdS, wmma::mem_row_major);
    __syncwarp();
    // Lane owns query columns lane and lane + 32 over the warp's 16 key rows:
    // consecutive lanes hit consecutive banks.
#pragma unroll
    for (int half_c = 0; half_c < 2; ++half_c) {
      const int c = lane + 32 * half_c, qi = q0 + c;
      const float lse_c = sm.lse[c] * kLog2e, delta_c = sm.delta[c];
#pragma unroll 4
      for (int rr = 0; rr < 16; ++rr) {
        const int kr = k0 + warp * 16 + rr;
        const bool valid = qi < Tn && kr < Tn && qi >= kr;
        const float p = valid ? exp2f(sm.s[warp][rr][c] * scale_log2 - lse_c) : 0.f;
        sm.p[warp][rr][c] = __float2bfloat16_rn(p);
        sm.ds[warp][rr][c] = __float2bfloat16_rn(p * (sm.dp[warp][rr][c] - delta_c));
      }
    }
    __syncwarp();
    probsTimesTile(dv, sm.p[warp], sm.d);   // dV += P^T dO
    probsTimesTile(dk, sm.ds[warp], sm.c);  // dK += dS^T Q
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], dk[n], kLdS, wmma::mem_row_major);
  __syncwarp();
  bf16* dbase_qkv = dqkv + int64_t(b) * Tn * stride;
  writeRows(dbase_qkv, sm.s[warp], k0 + warp * 16, Tn, stride, C + int64_t(h) * D, scale, accumulate);
  __syncwarp();
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], dv[n], kLdS, wmma::mem_row_major);
  __syncwarp();
  writeRows(dbase_qkv, sm.s[warp], k0 + warp * 16, Tn, stride, 2 * int64_t(C) + int64_t(h) * D, 1.f, accumulate);
}

__global__ void __launch_bounds__(128) attnBackwardQTc(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                                       const void* lse, int lse_bf16, const float* delta, int Tn,
                                                       int C, int H, float scale, bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  BwdSmem& sm = *reinterpret_cast<BwdSmem*>(smem_raw);
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  const int64_t stride = 3 * int64_t(C);
  const bf16* base = qkv + int64_t(b) * Tn * stride;
  const bf16* dbase = dout + int64_t(b) * Tn * C;
  const int64_t stat = (int64_t(b) * H + h) * Tn;
  const float scale_log2 = scale * kLog2e;
  loadTile(sm.c, base, q0, Tn, stride, int64_t(h) * D);  // Q
  loadTile(sm.d, dbase, q0, Tn, C, int64_t(h) * D);      // dO
  __syncthreads();
  RowFrags qa, ga;
  loadRowFrags(qa, sm.c, warp * 16);
  loadRowFrags(ga, sm.d, warp * 16);
  if (threadIdx.x < kTile) {
    const int q = q0 + threadIdx.x;
    sm.lse[threadIdx.x] = q < Tn ? loadAny(lse, lse_bf16, stat + q) * kLog2e : 0.f;
    sm.delta[threadIdx.x] = q < Tn ? delta[stat + q] : 0.f;
  }
  FragC dq[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(dq[n], 0.f);
  const int kv_end = min(Tn, q0 + kTile);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    loadTile(sm.c, base, k0, Tn, stride, C + int64_t(h) * D);              // K
    loadTile(sm.d, base, k0, Tn, stride, 2 * int64_t(C) + int64_t(h) * D);  // V
    __syncthreads();
    FragC acc[4];
    fragsTimesTileT(acc, qa, sm.c);  // S = Q K^T
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], acc[n], kLdS, wmma::mem_row_major);
    fragsTimesTileT(acc, ga, sm.d);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.dp[warp][0][n * 16], acc[n], kLdS, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int half_c = 0; half_c < 2; ++half_c) {
      const int c = lane + 32 * half_c, key = k0 + c;
#pragma unroll 4
      for (int rr = 0; rr < 16; ++rr) {
        const int q = q0 + warp * 16 + rr;
        const bool valid = q < Tn && key < Tn && key <= q;
        const float p = valid ? exp2f(sm.s[warp][rr][c] * scale_log2 - sm.lse[warp * 16 + rr]) : 0.f;
        sm.ds[warp][rr][c] = __float2bfloat16_rn(p * (sm.dp[warp][rr][c] - sm.delta[warp * 16 + rr]));
      }
    }
    __syncwarp();
    probsTimesTile(dq, sm.ds[warp], sm.c);  // dQ += dS K
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(&sm.s[warp][0][n * 16], dq[n], kLdS, wmma::mem_row_major);
  __syncwarp();
  writeRows(dqkv + int64_t(b) * Tn * stride, sm.s[warp], q0 + warp * 16, Tn, stride, int64_t(h) * D, scale,
            accumulate);
}

}  // namespace

bool attentionTensorCoreEligible(int64_t C, int64_t H, DType dt) {
  return dt == DType::BF16 && H > 0 && C / H == D && C % 8 == 0;
}

void prepareAttentionKernels() {
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(attnForwardTc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(sizeof(FwdSmem))));
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(attnBackwardKvTc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(sizeof(BwdSmem))));
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(attnBackwardQTc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(sizeof(BwdSmem))));
}

void attentionForwardTc(void* out, void* lse, DType lse_dt, const void* qkv, int64_t B, int64_t Tn, int64_t C,
                        int64_t H, cudaStream_t s) {
  dim3 grid(unsigned((Tn + kTile - 1) / kTile), unsigned(H), unsigned(B));
  attnForwardTc<<<grid, 128, sizeof(FwdSmem), s>>>(static_cast<bf16*>(out), lse, isBf16(lse_dt),
                                                   static_cast<const bf16*>(qkv), int(Tn), int(C), int(H),
                                                   1.f / sqrtf(float(D)));
  TANDEM_CUDA_LAUNCH_CHECK();
}

void attentionBackwardTc(void* dqkv, const void* dout, const void* qkv, const void* lse, DType lse_dt,
                         const float* delta, int64_t B, int64_t Tn, int64_t C, int64_t H, bool accumulate,
                         cudaStream_t s) {
  dim3 grid(unsigned((Tn + kTile - 1) / kTile), unsigned(H), unsigned(B));
  const float scale = 1.f / sqrtf(float(D));
  attnBackwardKvTc<<<grid, 128, sizeof(BwdSmem), s>>>(static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                                                      static_cast<const bf16*>(qkv), lse, isBf16(lse_dt), delta,
                                                      int(Tn), int(C), int(H), scale, accumulate);
  TANDEM_CUDA_LAUNCH_CHECK();
  attnBackwardQTc<<<grid, 128, sizeof(BwdSmem), s>>>(static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                                                     static_cast<const bf16*>(qkv), lse, isBf16(lse_dt), delta,
                                                     int(Tn), int(C), int(H), scale, accumulate);
  TANDEM_CUDA_LAUNCH_CHECK();
}

}  // namespace tandem::cuda
