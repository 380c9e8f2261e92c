#pragma once
// Tensor maps of the executor's bf16 tensors for the Tensor Memory
// Accelerator (cp.async.bulk.tensor): boxes 64 elements (128 bytes) wide in
// the 128-byte swizzle, the layout the kernels' shared tiles and wgmma use
// (16-byte chunk c of row r at c ^ (r & 7)). Encoded once per pointer, shape
// and box: the executor's tensors keep their addresses for the whole run.
// The encoder comes from the driver the runtime loaded
// (cudaGetDriverEntryPointByVersion), never from a linked libcuda.
#include <cuda.h>  // CUtensorMap only

#include <cstdint>

namespace tandem::cuda {

// A row-major matrix [rows, cols] in boxes of 64 columns x box_rows rows.
const CUtensorMap& matrixTileMap(const void* ptr, int64_t rows, int64_t cols, int box_rows);

// `batches` row-major matrices [rows, cols] one after another, in boxes of
// 64 columns x 64 rows of one matrix; rows at or past `rows` read as zeros
// (a batch's last, partial tile does not reach into the next batch).
const CUtensorMap& batchedTileMap(const void* ptr, int64_t batches, int64_t rows, int64_t cols);

}  // namespace tandem::cuda
