#include "engine/cuda/tensor_map.h"

#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

namespace tandem::cuda {
namespace {

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
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (needed by the TMA kernels)");
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// rank 2: [rows, cols]; rank 3: [batches, rows, cols]. dims[0] = cols is the
// contiguous one; rows past dims[1] read as zeros
// (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE fills with zeros, not NaN).
const CUtensorMap& cachedMap(cuuint32_t rank, const void* ptr, int64_t batches, int64_t rows, int64_t cols,
                             int box_rows) {
  static std::mutex mu;
  static std::map<std::tuple<cuuint32_t, const void*, int64_t, int64_t, int64_t, int>, CUtensorMap> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(rank, ptr, batches, rows, cols, box_rows);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(batches)};
  const cuuint64_t strides[2] = {cuuint64_t(cols) * 2, cuuint64_t(rows) * cuuint64_t(cols) * 2};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(ptr), dims, strides,
                               box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ") for " +
                             std::to_string(batches) + " x " + std::to_string(rows) + " x " + std::to_string(cols) +
                             " bf16 at a " + std::to_string(reinterpret_cast<uintptr_t>(ptr) % 16) +
                             "-byte offset from 16-byte alignment");
  return cache.emplace(key, map).first->second;
}

}  // namespace

const CUtensorMap& matrixTileMap(const void* ptr, int64_t rows, int64_t cols, int box_rows) {
  return cachedMap(2, ptr, 1, rows, cols, box_rows);
}

const CUtensorMap& batchedTileMap(const void* ptr, int64_t batches, int64_t rows, int64_t cols) {
  return cachedMap(3, ptr, batches, rows, cols, 64);
}

}  // namespace tandem::cuda
