#pragma once
// What a rank's executor asks of the collectives of one process group. Two
// implementations share the executor: NCCL (nccl_comm.h: a process per
// rank, the production path) and the ranks that share one GPU in one
// process (local_comm.h: `tandem run --ranks-per-gpu`, chosen explicitly to
// check multi-rank plans where one GPU is at hand). Ranks are places in the
// group (0 .. world() - 1); every call is issued on stream `s` and ordered
// there like a kernel; `what` names the task in errors.

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "engine/ir/types.h"

namespace tandem::cuda {

class Communicator {
 public:
  virtual ~Communicator() = default;

  // In place or out of place; averaged or summed.
  virtual void allReduce(const void* send, void* recv, int64_t count, DType dt, bool average, cudaStream_t s,
                         const std::string& what) = 0;
  // In place over `buffer` of world * shard elements: after the call this
  // rank's shard [rank, rank + 1) * shard holds the average (or sum) over
  // the ranks; the rest keeps this rank's values.
  virtual void reduceScatterInPlace(void* buffer, int64_t shard, DType dt, bool average, cudaStream_t s,
                                    const std::string& what) = 0;
  // In place over `buffer` of world * shard elements: every rank's shard
  // replaces the same range here.
  virtual void allGatherInPlace(void* buffer, int64_t shard, DType dt, cudaStream_t s, const std::string& what) = 0;
  // Out of place: recv[0, shard) = the average (or sum) over the ranks of
  // send[rank * shard, (rank + 1) * shard).
  virtual void reduceScatter(const void* send, void* recv, int64_t shard, DType dt, bool average, cudaStream_t s,
                             const std::string& what) = 0;
  // recv[r * count, (r + 1) * count) = rank r's send[0, count).
  virtual void allGather(const void* send, void* recv, int64_t count, DType dt, cudaStream_t s,
                         const std::string& what) = 0;

  // Point to point between pipeline stages: `count` elements to or from
  // place `peer`. Sends and receives between two places are matched in the
  // order each side issues them.
  virtual void send(const void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) = 0;
  virtual void recv(void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) = 0;

  // Throws (after aborting) when the communicator reports an asynchronous error.
  virtual void checkAsync(const std::string& what) = 0;
  // Stops the communicator without waiting for peers; later calls throw.
  virtual void abort() = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
};

}  // namespace tandem::cuda
