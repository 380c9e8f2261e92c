// Matmul forward and both backward rules, built on one blocked kernel.
//
// Every product here has the shape C[M,N] (+)= A(M,P) * B(P,N) where A and B
// may be read with any strides (so W^T and dy^T need no transposed copy). The
// kernel keeps an MR x NR tile of C in local accumulators and walks p in
// ascending order, broadcasting one A value against a contiguous slice of a B
// row: the innermost loop runs over contiguous memory with no reduction across
// lanes, so the compiler vectorises it without reassociating sums. Each element
// of C is therefore sum_p A(i,p) B(p,j) added in ascending p, whatever the tile
// sizes: results do not depend on blocking.
//
// The sum is formed from zero and only then added to (or stored into) C, so
// accumulate=true gives exactly "old value + fresh product".
//
// Two builds of the same tile code: a baseline one (16-byte vectors, any
// x86-64 or AArch64) and, on x86-64 CPUs that have it, an AVX2 one chosen at
// run time. Both do the same roundings in the same order (kernels_isa.h).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/kernels_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TANDEM_MATMUL_HAS_AVX2 1
#else
#define TANDEM_MATMUL_HAS_AVX2 0
#endif

namespace tandem::cpu {

bool matmulIsaSupported(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::Baseline: return true;
    case MatmulIsa::Avx2:
#if TANDEM_MATMUL_HAS_AVX2
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
  }
  return false;
}

namespace {

// Where element (r, c) of an operand lives: base[r * row_stride + c * col_stride].
struct Strides {
  int64_t row_stride;
  int64_t col_stride;
};

// A short vector of T (GCC/Clang vector extension) that the compiler keeps in
// one register: SSE2 or NEON for 16 bytes, AVX for 32. Element-wise ops only,
// so no sum is reassociated.
template <class T, int Bytes>
using Vec __attribute__((vector_size(Bytes))) = T;

// The tile code is forced inline so that it is generated inside each ISA's
// entry point below and takes that entry point's instruction set.
#define TANDEM_KERNEL_INLINE inline __attribute__((always_inline))

// One full tile of MR rows and NV vectors of columns: C rows [i0, i0+MR),
// columns [j0, j0 + NV * lanes). The MR x NV accumulators live in registers.
// `panel` holds columns [j0, j0 + NR) of B packed as P contiguous rows of NR.
template <class T, int Bytes, int MR, int NV>
TANDEM_KERNEL_INLINE void tileProduct(T* C, int64_t N, const T* A, Strides sa, const T* panel,
                                      int64_t P, int64_t i0, int64_t j0, bool accumulate) {
  using V = Vec<T, Bytes>;
  constexpr int kLanes = int(sizeof(V) / sizeof(T));
  constexpr int NR = NV * kLanes;
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  const T* a_base = A + i0 * sa.row_stride;
  for (int64_t p = 0; p < P; ++p) {
    const T* b_row = panel + p * NR;
    V b[NV];
    // memcpy: unaligned loads and stores without vector-typed helper functions,
    // whose 32-byte arguments would not match the baseline calling convention.
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], b_row + v * kLanes, sizeof(V));
    const T* a_col = a_base + p * sa.col_stride;
    for (int r = 0; r < MR; ++r) {
      const T a = a_col[r * sa.row_stride];
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; ++r) {
    T* c_row = C + (i0 + r) * N + j0;
    for (int v = 0; v < NV; ++v) {
      T* c = c_row + v * kLanes;
      V out = acc[r][v];
      if (accumulate) {
        V old;
        std::memcpy(&old, c, sizeof(V));
        out = old + out;
      }
      std::memcpy(c, &out, sizeof(V));
    }
  }
}

// Ragged edges (fewer than MR rows or NR columns left): same summation order,
// one element at a time.
template <class T>
void edgeProduct(T* C, int64_t N, const T* A, Strides sa, const T* B, Strides sb, int64_t P,
                 int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end, bool accumulate) {
  for (int64_t i = i_begin; i < i_end; ++i) {
    for (int64_t j = j_begin; j < j_end; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < P; ++p)
        sum += A[i * sa.row_stride + p * sa.col_stride] * B[p * sb.row_stride + j * sb.col_stride];
      C[i * N + j] = accumulate ? C[i * N + j] + sum : sum;
    }
  }
}

// C[M,N] (+)= A(M,P) B(P,N), C row-major.
template <class T, int Bytes, int MR, int NV>
TANDEM_KERNEL_INLINE void gemmTiles(T* C, const T* A, Strides sa, const T* B, Strides sb, int64_t M,
                                    int64_t N, int64_t P, bool accumulate) {
  constexpr int NR = NV * int(Bytes / sizeof(T));
  const int64_t m_full = M - M % MR;
  const int64_t n_full = N - N % NR;
  // Column strips outermost. Each strip of B is first copied into a
  // contiguous P x NR panel (whatever B's layout, e.g. W read transposed),
  // which then stays in cache while every row tile of A streams past it.
  std::vector<T> panel(static_cast<std::size_t>(P * NR));
  for (int64_t j0 = 0; j0 < n_full; j0 += NR) {
    for (int64_t p = 0; p < P; ++p)
      for (int c = 0; c < NR; ++c)
        panel[std::size_t(p * NR + c)] = B[p * sb.row_stride + (j0 + c) * sb.col_stride];
    for (int64_t i0 = 0; i0 < m_full; i0 += MR)
      tileProduct<T, Bytes, MR, NV>(C, N, A, sa, panel.data(), P, i0, j0, accumulate);
  }
  if (n_full < N) edgeProduct(C, N, A, sa, B, sb, P, 0, m_full, n_full, N, accumulate);
  if (m_full < M) edgeProduct(C, N, A, sa, B, sb, P, m_full, M, 0, N, accumulate);
}

// Baseline (any x86-64 or AArch64): 16-byte vectors, a tile of 4 rows x 4
// vectors = 16 accumulator registers. Of the sizes tried (2..8 rows, 1..8
// vectors) this was fastest for the tiny-GPT shapes (M = 512, N and K in
// 64..256) on one core.
template <class T>
void gemmBaseline(T* C, const T* A, Strides sa, const T* B, Strides sb, int64_t M, int64_t N,
                  int64_t P, bool accumulate) {
  gemmTiles<T, 16, 4, 4>(C, A, sa, B, sb, M, N, P, accumulate);
}

#if TANDEM_MATMUL_HAS_AVX2
// AVX2: 32-byte vectors, 4 rows x 2 vectors (8 accumulators: the tile is as
// wide as the baseline's and leaves registers for the B slice). Only AVX2's
// plain multiplies and adds are enabled, not FMA, so every product is rounded
// before it is added exactly as on the baseline path: the two paths give
// bitwise identical results and differ in speed only (about 2x).
template <class T>
__attribute__((target("avx2"))) void gemmAvx2(T* C, const T* A, Strides sa, const T* B, Strides sb,
                                               int64_t M, int64_t N, int64_t P, bool accumulate) {
  gemmTiles<T, 32, 4, 2>(C, A, sa, B, sb, M, N, P, accumulate);
}
#endif

std::atomic<int>& selectedIsa() {
  static std::atomic<int> isa{int(matmulIsaSupported(MatmulIsa::Avx2) ? MatmulIsa::Avx2
                                                                       : MatmulIsa::Baseline)};
  return isa;
}

template <class T>
void gemm(T* C, const T* A, Strides sa, const T* B, Strides sb, int64_t M, int64_t N, int64_t P,
          bool accumulate) {
#if TANDEM_MATMUL_HAS_AVX2
  if (selectedIsa().load(std::memory_order_relaxed) == int(MatmulIsa::Avx2)) {
    gemmAvx2(C, A, sa, B, sb, M, N, P, accumulate);
    return;
  }
#endif
  gemmBaseline(C, A, sa, B, sb, M, N, P, accumulate);
}

}  // namespace

MatmulIsa matmulIsa() { return MatmulIsa(selectedIsa().load()); }

void setMatmulIsa(MatmulIsa isa) {
  if (!matmulIsaSupported(isa)) {
    const std::string name = isa == MatmulIsa::Avx2 ? "avx2" : "baseline";
    const std::string allowed = matmulIsaSupported(MatmulIsa::Avx2) ? "baseline, avx2" : "baseline";
    throw std::runtime_error("matmul: instruction set " + name +
                             " is not supported by this CPU or build (allowed: " + allowed + ")");
  }
  selectedIsa().store(int(isa));
}

template <class T>
void matmulForward(T* y, const T* x, const T* W, const T* bias, int64_t M, int64_t N, int64_t K) {
  // y = x W^T: B(k, n) = W[n, k], read transposed through the strides.
  gemm(y, x, Strides{K, 1}, W, Strides{1, K}, M, N, K, /*accumulate=*/false);
  if (bias) {
    for (int64_t m = 0; m < M; ++m) {
      T* y_row = y + m * N;
      for (int64_t n = 0; n < N; ++n) y_row[n] += bias[n];
    }
  }
}

template <class T>
void matmulBackwardData(T* dx, const T* dy, const T* W, int64_t M, int64_t N, int64_t K,
                        bool accumulate) {
  // dx[M,K] = dy[M,N] W[N,K]: W is already row-major over K.
  gemm(dx, dy, Strides{N, 1}, W, Strides{K, 1}, M, K, N, accumulate);
}

template <class T>
void columnSums(T* db, const T* dy, int64_t M, int64_t N, bool accumulate) {
  // A reduction over all M rows: summed in double so long batches do not
  // lose the small contributions.
  std::vector<double> sum(std::size_t(N), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const T* dy_row = dy + m * N;
    for (int64_t n = 0; n < N; ++n) sum[std::size_t(n)] += double(dy_row[n]);
  }
  for (int64_t n = 0; n < N; ++n) {
    const T total = T(sum[std::size_t(n)]);
    db[n] = accumulate ? T(db[n] + total) : total;
  }
}

template <class T>
void matmulBackwardWeight(T* dW, T* db, const T* dy, const T* x, int64_t M, int64_t N, int64_t K,
                          bool accumulate) {
  // dW[N,K] = dy^T[N,M] x[M,K]: read dy transposed through the strides.
  gemm(dW, dy, Strides{1, N}, x, Strides{K, 1}, N, K, M, accumulate);
  if (db) columnSums(db, dy, M, N, accumulate);
}

#define TANDEM_INSTANTIATE_MATMUL(T)                                                            \
  template void matmulForward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);  \
  template void matmulBackwardData<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, bool); \
  template void matmulBackwardWeight<T>(T*, T*, const T*, const T*, int64_t, int64_t, int64_t, bool); \
  template void columnSums<T>(T*, const T*, int64_t, int64_t, bool);

TANDEM_INSTANTIATE_MATMUL(float)
TANDEM_INSTANTIATE_MATMUL(double)
#undef TANDEM_INSTANTIATE_MATMUL

}  // namespace tandem::cpu
