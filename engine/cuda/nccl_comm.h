#pragma once
// One NCCL communicator in non-blocking mode, so no call can hang the
// process: every wait polls the communicator's error state with a deadline
// and aborts the communicator (ncclCommAbort) on an error or a timeout; the
// error names the rank and the collective that did not finish.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "engine/types.h"

namespace tandem::cuda {

using NcclId = std::array<char, 128>;

// Creates a fresh unique id (rank 0 does this and hands it to the others).
NcclId makeNcclId();

class NcclComm {
 public:
  NcclComm(const NcclId& id, int rank, int world, double timeout_s);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // In place or out of place; averaged (ncclAvg) or summed.
  void allReduce(const void* send, void* recv, int64_t count, DType dt, bool average,
                 cudaStream_t s, const std::string& what);
  // Throws (after aborting) when the communicator reports an asynchronous error.
  void checkAsync(const std::string& what);
  // Aborts the communicator; later calls throw. The abort runs on a detached
  // thread: with a peer gone, ncclCommAbort can itself wait on stuck work,
  // and the caller must still be able to report the error and leave.
  void abort();
  int rank() const { return rank_; }
  int world() const { return world_; }
  double timeoutSeconds() const { return timeout_s_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  int rank_;
  int world_;
  double timeout_s_;
};

}  // namespace tandem::cuda
