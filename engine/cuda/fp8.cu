// FP8 GEMM operands (training.precision fp8): the per-tensor cast with its
// scale from the tensor's own largest magnitude (current scaling) or from
// its key's history (delayed scaling, whose state this file keeps), and the
// byte transpose that gives Hopper's FP8 GEMMs (which read both operands
// K-major) the backward's operands. The arithmetic is the CPU reference's
// (engine/numerics/fp8.h): amax over the values as floats, scale = largest
// finite / amax, code = the saturating round-to-nearest-even FP8 of
// x * scale.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/fp8_write.cuh"
#include "engine/cuda/kernels.h"
#include "engine/numerics/fp8_history.h"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;
using gpu_footprint::kFp8AmaxBlocks;

__device__ __forceinline__ float absF(bf16 x) { return fabsf(__bfloat162float(x)); }
__device__ __forceinline__ float absF(float x) { return fabsf(x); }

// Each block's largest |x| into partials[blockIdx.x] (a fixed grid, so the
// cast knows how many there are). fmaxf ignores NaN, as the CPU's std::max
// does. The bf16 path keeps kAmaxLoads 16-byte loads in flight per thread:
// with one, the fixed grid moved about 1.1 TB/s on one H100 (21 ms of a
// 171 ms FP8 step of a 1.1B Llama).
constexpr int kAmaxLoads = 4;
template <class T>
__global__ void amaxPartialsKernel(const T* x, int64_t n, float* partials) {
  __shared__ float shared[32];
  float m = 0.f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if constexpr (sizeof(T) == 2) {
    if (n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      const uint4* v = reinterpret_cast<const uint4*>(x);
      const int64_t vectors = n / 8;
      for (int64_t j = i; j < vectors; j += kAmaxLoads * stride) {
        uint4 loaded[kAmaxLoads];
#pragma unroll
        for (int u = 0; u < kAmaxLoads; ++u)
          loaded[u] = j + u * stride < vectors ? v[j + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kAmaxLoads; ++u) {
          float f[8];
          unpack8(loaded[u], f);
#pragma unroll
          for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[k]));
        }
      }
      i = n;  // done
    }
  }
  for (; i < n; i += stride) m = fmaxf(m, absF(x[i]));
  m = blockMax(m, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// The scale from the partial maxima; 1 where amax says nothing (0, infinite
// or NaN). The CPU reference keeps the cast's previous scale there instead:
// with amax 0 every code is 0 whatever the scale, so the GEMM's results are
// the same; a tensor holding infinities or NaN has no meaningful result on
// either side.
__device__ __forceinline__ float scaleFromPartials(const float* partials, float largest, float* shared) {
  float m = 0.f;
  for (int j = threadIdx.x; j < kFp8AmaxBlocks; j += blockDim.x) m = fmaxf(m, partials[j]);
  m = blockMax(m, shared);
  if (!(m > 0.f) || !isfinite(m)) return 1.f;
  const float scale = __fdiv_rn(largest, m);
  return isfinite(scale) ? scale : 1.f;
}

// This thread's share of the cast of x[n] (grid-stride), returning the
// largest |x| it read.
template <class T, int kFormat>
__device__ __forceinline__ float castRange(uint8_t* out, const T* x, int64_t n, float scale) {
  float m = 0.f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if constexpr (sizeof(T) == 2) {
    if (n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
      const uint4* v = reinterpret_cast<const uint4*>(x);
      uint2* o = reinterpret_cast<uint2*>(out);
      for (int64_t j = i; j < n / 8; j += stride) {
        float f[8];
        unpack8(v[j], f);
#pragma unroll
        for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[k]));
        o[j] = toFp8x8<kFormat>(f, scale);
      }
      return m;
    }
  }
  for (; i < n; i += stride) {
    const float v = toF(x[i]);
    m = fmaxf(m, fabsf(v));
    out[i] = toFp8<kFormat>(__fmul_rn(v, scale));
  }
  return m;
}

template <class T, int kFormat>
__global__ void castKernel(uint8_t* out, const T* x, int64_t n, const float* partials, float largest,
                           float* scale_inv) {
  __shared__ float shared[32];
  const float scale = scaleFromPartials(partials, largest, shared);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = __frcp_rn(scale);
  castRange<T, kFormat>(out, x, n, scale);
}

template <class T, int kFormat>
__global__ void castDelayedKernel(uint8_t* out, const T* x, int64_t n, Fp8Write w) {
  const float scale = *w.scale;
  finishFp8Write(castRange<T, kFormat>(out, x, n, scale), scale, w);
}

// The cast's values for the tiled writers (storeTilesBothLayouts): eight
// consecutive elements of x[rows, cols] (16-byte aligned) as floats.
template <class T>
struct CastValues {
  static constexpr int kParts = 1, kLoads = sizeof(T) == 2 ? 1 : 2;
  static constexpr bool kLoops = true;
  const T* x;
  int64_t cols;
  __device__ void load(int64_t r, int64_t c, uint4 (&raw)[kLoads]) const {
    const uint4* p = reinterpret_cast<const uint4*>(x + r * cols + c);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) raw[i] = p[i];
  }
  __device__ void compute(int64_t, int64_t, const uint4 (&raw)[kLoads], float (&v)[1][8]) const {
    if constexpr (sizeof(T) == 2) {
      unpack8(raw[0], v[0]);
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        v[0][4 * i] = __uint_as_float(raw[i].x), v[0][4 * i + 1] = __uint_as_float(raw[i].y);
        v[0][4 * i + 2] = __uint_as_float(raw[i].z), v[0][4 * i + 3] = __uint_as_float(raw[i].w);
      }
    }
  }
};

// The cast of castKernel over x[rows, cols], writing the codes both as
// stored (out[rows, cols]) and transposed (out_t[cols, rows]): a tile per
// block, its codes through shared memory, so the transposed copy costs one
// more byte written per element instead of a pass that reads the codes
// again. cols a multiple of 8, rows of 4, x 16-byte aligned. Delayed
// scaling's cast goes through launchFp8Tiles.
template <class T, int kFormat, class Shape>
__global__ void castTransposeKernel(uint8_t* out, uint8_t* out_t, const T* x, int64_t rows, int64_t cols,
                                    const float* partials, float largest, float* scale_inv, float* scale_inv_t) {
  __shared__ float shared[32];
  const float scale = scaleFromPartials(partials, largest, shared);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = *scale_inv_t = __frcp_rn(scale);
  __shared__ __align__(16) ByteTileOf<Shape::kRows, Shape::kCols> tile[1];  // written 4 bytes at a time
  uint8_t* const outs[1] = {out};
  uint8_t* const outs_t[1] = {out_t};
  storeTilesBothLayouts<kFormat, kThreads, Shape>(outs, cols, outs_t, rows, cols, int64_t(blockIdx.y) * Shape::kRows,
                                                  int64_t(blockIdx.x) * Shape::kCols, scale, tile,
                                                  CastValues<T>{x, cols});
}

// Delayed scaling's end of a step, a block per key (fp8DelayedEndStep).
__global__ void delayedEndStepKernel(Fp8DelayedState st) {
  __shared__ float shared[32];
  const int k = blockIdx.x;
  const int n = st.count[k];  // steps already in the history
  const int at = n % kFp8History;
  const float amax = __uint_as_float(st.amax[k]);
  float* history = st.history + int64_t(k) * kFp8History;
  const int held = min(n + 1, kFp8History);
  float m = 0.f;
  for (int j = threadIdx.x; j < held; j += blockDim.x) m = fmaxf(m, j == at ? amax : history[j]);
  m = blockMax(m, shared);
  if (threadIdx.x != 0) return;
  history[at] = amax;
  st.count[k] = n + 1;
  st.amax[k] = 0u;
  const float previous = st.scale[k];
  st.last[k] = previous;
  // fp8Scale (engine/numerics/fp8.h) with margin 0.
  const float scale = m > 0.f && isfinite(m) ? __fdiv_rn(st.format[k] ? 57344.0f : 448.0f, m) : previous;
  st.scale[k] = isfinite(scale) ? scale : previous;
}

// out[c, r] = in[r, c] for bytes, in 64 x 64 tiles through shared memory,
// four bytes per access (rows and cols multiples of 4).
__global__ void transposeBytesKernel(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols) {
  __shared__ ByteTile tile;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  constexpr int kWords = kTile / 4;  // 4-byte words per tile row
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += blockDim.x) {
    const int tr = idx / kWords, tw = idx % kWords;
    uint32_t word = 0;
    if (r0 + tr < rows && c0 + 4 * tw < cols)
      word = *reinterpret_cast<const uint32_t*>(in + (r0 + tr) * cols + c0 + 4 * tw);
#pragma unroll
    for (int b = 0; b < 4; ++b) tile[tr][4 * tw + b] = uint8_t(word >> (8 * b));
  }
  __syncthreads();
  storeTileTransposed<kTile, kTile>(out, tile, r0, c0, rows, cols);
}

// Partial column sums of decoded FP8 codes (a bias gradient from an FP8
// gradient): blockDim (32, 8), grid (ceil(N / 32), rows of partials); row
// slice blockIdx.y of the M rows into partial[blockIdx.y * N + n].
template <int kFormat>
__global__ void biasPartialFp8Kernel(float* partial, const uint8_t* codes, const float* scale_inv, int64_t M,
                                     int64_t N) {
  const float inv = *scale_inv;
  auto decoded = [&](int64_t r, int64_t n) {
    const __half_raw h =
        __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(codes[r * N + n]), kFormat == 0 ? __NV_E4M3 : __NV_E5M2);
    return __fmul_rn(__half2float(__half(h)), inv);
  };
  columnPartialSums(partial, decoded, M, N);
}

// The same sums from the transposed codes [N, M]: a block per row n, its
// sum into sums[n] (the partials' one row), in a fixed order.
template <int kFormat>
__global__ void biasRowSumFp8Kernel(float* sums, const uint8_t* codes_t, const float* scale_inv, int64_t M) {
  __shared__ float shared[32];
  const float inv = *scale_inv;
  const uint8_t* row = codes_t + int64_t(blockIdx.x) * M;
  float acc = 0.f;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(row[m]), kFormat == 0 ? __NV_E4M3 : __NV_E5M2);
    acc += __fmul_rn(__half2float(__half(h)), inv);
  }
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0) sums[blockIdx.x] = acc;
}

}  // namespace

void biasGradientFp8(void* db, const void* codes, Fp8Format format, const float* scale_inv, int64_t M, int64_t N,
                     bool transposed, bool accumulate, DType dt, float* scratch, cudaStream_t s) {
  if (transposed) {
    if (N > 0x7fffffff) throw CudaError("biasGradientFp8: too many columns for one launch");
    const auto* c = static_cast<const uint8_t*>(codes);
    if (format == Fp8Format::E4M3) biasRowSumFp8Kernel<0><<<unsigned(N), kThreads, 0, s>>>(scratch, c, scale_inv, M);
    else biasRowSumFp8Kernel<1><<<unsigned(N), kThreads, 0, s>>>(scratch, c, scale_inv, M);
    TANDEM_CUDA_CHECK(cudaGetLastError());
    biasGradientFromPartials(db, scratch, N, 1, accumulate, dt, s);
    return;
  }
  const dim3 grid(unsigned((N + 31) / 32), gpu_footprint::kBiasRowChunks);
  if (format == Fp8Format::E4M3)
    biasPartialFp8Kernel<0><<<grid, dim3(32, 8), 0, s>>>(scratch, static_cast<const uint8_t*>(codes), scale_inv, M, N);
  else
    biasPartialFp8Kernel<1><<<grid, dim3(32, 8), 0, s>>>(scratch, static_cast<const uint8_t*>(codes), scale_inv, M, N);
  TANDEM_CUDA_CHECK(cudaGetLastError());
  biasGradientFromPartials(db, scratch, N, gpu_footprint::kBiasRowChunks, accumulate, dt, s);
}

void fp8CastCurrentScaling(void* out, const void* x, DType dt, int64_t n, Fp8Format format, float* scale_inv,
                           float* amax_partials, bool amax_measured, cudaStream_t s) {
  const float largest = format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  const unsigned grid = gridFor((n + 7) / 8, kThreads, 4096);
  TANDEM_DISPATCH_DT(dt, {
    const T* in = static_cast<const T*>(x);
    if (!amax_measured) amaxPartialsKernel<T><<<kFp8AmaxBlocks, kThreads, 0, s>>>(in, n, amax_partials);
    if (format == Fp8Format::E4M3)
      castKernel<T, 0><<<grid, kThreads, 0, s>>>(static_cast<uint8_t*>(out), in, n, amax_partials, largest, scale_inv);
    else
      castKernel<T, 1><<<grid, kThreads, 0, s>>>(static_cast<uint8_t*>(out), in, n, amax_partials, largest, scale_inv);
  });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void fp8CastTransposeCurrentScaling(void* out, void* out_t, const void* x, DType dt, int64_t rows, int64_t cols,
                                    Fp8Format format, float* scale_inv, float* scale_inv_t, float* amax_partials,
                                    bool amax_measured, cudaStream_t s) {
  const int64_t align = dt == DType::BF16 ? 16 : 32;  // a row of 8 elements' start, the float path's two loads
  if (cols % 8 != 0 || rows % 4 != 0 || reinterpret_cast<uintptr_t>(x) % align != 0 ||
      reinterpret_cast<uintptr_t>(out) % 8 != 0 || reinterpret_cast<uintptr_t>(out_t) % 4 != 0)
    throw CudaError("fp8CastTransposeCurrentScaling: columns must be a multiple of 8, rows of 4, and the buffers "
                    "aligned");
  const float largest = format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  withFp8Tiles([&](auto shape) {
    using Shape = decltype(shape);
    const dim3 grid = tileGrid<Shape>(rows, cols, "fp8CastTransposeCurrentScaling");
    TANDEM_DISPATCH_DT(dt, {
      const T* in = static_cast<const T*>(x);
      if (!amax_measured) amaxPartialsKernel<T><<<kFp8AmaxBlocks, kThreads, 0, s>>>(in, rows * cols, amax_partials);
      if (format == Fp8Format::E4M3)
        castTransposeKernel<T, 0, Shape><<<grid, kThreads, 0, s>>>(o, ot, in, rows, cols, amax_partials, largest,
                                                                    scale_inv, scale_inv_t);
      else
        castTransposeKernel<T, 1, Shape><<<grid, kThreads, 0, s>>>(o, ot, in, rows, cols, amax_partials, largest,
                                                                    scale_inv, scale_inv_t);
    });
  });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void fp8CastDelayed(void* out, const void* x, DType dt, int64_t n, const Fp8Write& w, cudaStream_t s) {
  const unsigned grid = gridFor((n + 7) / 8, kThreads, 4096);
  auto* o = static_cast<uint8_t*>(out);
  TANDEM_DISPATCH_DT(dt, {
    const T* in = static_cast<const T*>(x);
    if (w.format == Fp8Format::E4M3) castDelayedKernel<T, 0><<<grid, kThreads, 0, s>>>(o, in, n, w);
    else castDelayedKernel<T, 1><<<grid, kThreads, 0, s>>>(o, in, n, w);
  });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void fp8CastTransposeDelayed(void* out, void* out_t, const void* x, DType dt, int64_t rows, int64_t cols,
                             const Fp8Write& w, cudaStream_t s) {
  const int64_t align = dt == DType::BF16 ? 16 : 32;
  if (cols % 8 != 0 || rows % 4 != 0 || reinterpret_cast<uintptr_t>(x) % align != 0 ||
      reinterpret_cast<uintptr_t>(out) % 8 != 0 || reinterpret_cast<uintptr_t>(out_t) % 4 != 0)
    throw CudaError("fp8CastTransposeDelayed: columns must be a multiple of 8, rows of 4, and the buffers aligned");
  const TileOutputs<1> o{{static_cast<uint8_t*>(out)}, {static_cast<uint8_t*>(out_t)}, cols};
  TANDEM_DISPATCH_DT(dt, {
    launchFp8Tiles<kThreads>(o, rows, cols, w, CastValues<T>{static_cast<const T*>(x), cols}, s,
                             "fp8CastTransposeDelayed");
  });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

Fp8Tile fp8Tile() {
  switch (envChoice("TANDEM_FP8_TILE", {"64x64", "32x128", "128x64"})) {
    case 1: return Fp8Tile::k32x128;
    case 2: return Fp8Tile::k128x64;
    default: return Fp8Tile::k64x64;
  }
}

Fp8Walk fp8Walk() {
  switch (envChoice("TANDEM_FP8_WRITER", {"tiles", "loop"})) {
    case 0: return Fp8Walk::kTiles;
    case 1: return Fp8Walk::kLoop;
    default: return Fp8Walk::kPerWriter;
  }
}

Fp8DelayedState fp8DelayedStateAt(void* at, int keys) {
  Fp8DelayedState st;
  st.keys = keys;
  if (keys == 0) return st;
  auto* p = static_cast<std::byte*>(at);
  const int64_t array = gpu_footprint::fp8DelayedArrayBytes(keys);
  st.scale = reinterpret_cast<float*>(p);
  st.last = reinterpret_cast<float*>(p + array);
  st.amax = reinterpret_cast<unsigned*>(p + 2 * array);
  st.count = reinterpret_cast<int*>(p + 3 * array);
  st.format = reinterpret_cast<int*>(p + 4 * array);
  st.history = reinterpret_cast<float*>(p + 5 * array);
  return st;
}

void fp8DelayedEndStep(const Fp8DelayedState& state, cudaStream_t s) {
  if (state.keys == 0) return;
  delayedEndStepKernel<<<unsigned(state.keys), kThreads, 0, s>>>(state);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void transposeBytes(void* out, const void* in, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows % 4 != 0 || cols % 4 != 0 || reinterpret_cast<uintptr_t>(in) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 4 != 0)
    throw CudaError("transposeBytes: rows and columns must be multiples of 4 and the pointers 4-byte aligned");
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
  if (grid.y > 65535) throw CudaError("transposeBytes: too many rows for one launch");
  transposeBytesKernel<<<grid, kThreads, 0, s>>>(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), rows,
                                                cols);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cuda
