#pragma once
// The kernels of the in-process communicator (local_comm.h): one launch
// performs a whole collective over the buffers of every member of a group
// on one GPU. Sums run in rank order with fp32 (or integer) accumulation,
// so every member gets the same bits and a run repeats itself exactly.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/ir/types.h"

namespace tandem::cuda {

constexpr int kMaxLocalRanks = 16;

enum class LocalOp {
  AllReduce,             // out[r][i] = sum over m of in[m][i]                      (i < count)
  ReduceScatterInPlace,  // out[i / count][i] = sum over m of in[m][i]              (i < members * count)
  ReduceScatter,         // out[i / count][i % count] = sum over m of in[m][i]      (i < members * count)
  AllGatherInPlace,      // out[r][i] = in[i / count][i] for r != i / count          (i < members * count)
  AllGather,             // out[r][i] = in[i / count][i % count]                     (i < members * count)
};

// Passed by value (graph-safe, no device tables).
struct LocalBuffers {
  const void* in[kMaxLocalRanks] = {};
  void* out[kMaxLocalRanks] = {};
};

// `average` divides sums by `members`. Throws CudaError for a dtype the op
// cannot take (reductions of FP8 or U8).
void localCollective(LocalOp op, const LocalBuffers& buffers, int members, int64_t count, DType dt, bool average,
                     cudaStream_t s);

}  // namespace tandem::cuda
