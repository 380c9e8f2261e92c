#pragma once
// One NCCL communicator in non-blocking mode, so no call can hang the
// process: every wait polls the communicator's error state with a deadline
// and aborts the communicator (ncclCommAbort) on an error or a timeout; the
// error names the rank and the collective that did not finish.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "engine/cuda/communicator.h"
#include "engine/ir/types.h"

namespace tandem::cuda {

using NcclId = std::array<char, 128>;

// Creates a fresh unique id (rank 0 does this and hands it to the others).
NcclId makeNcclId();

// One rank's clock against rank 0's (see NcclComm::measureClockOffsets).
struct ClockOffset {
  int64_t local_ns = 0;   // this rank's clock at the measurement (its reading in the kept round)
  int64_t offset_ns = 0;  // add to this rank's time to get rank 0's (0 on rank 0)
  int64_t rtt_ns = 0;     // round trip of the kept round: the offset is right within rtt/2
  int rounds = 0;
};

class NcclComm final : public Communicator {
 public:
  NcclComm(const NcclId& id, int rank, int world, double timeout_s);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Collective over this communicator (every rank calls it, in the same
  // order): the communicator of the ranks that pass the same `color`
  // (>= 0), places by `key`; a rank that passes a negative color takes
  // part and gets nullptr (ncclCommSplit).
  std::unique_ptr<NcclComm> split(int color, int key);

  void allReduce(const void* send, void* recv, int64_t count, DType dt, bool average, cudaStream_t s,
                 const std::string& what) override;
  void reduceScatterInPlace(void* buffer, int64_t shard, DType dt, bool average, cudaStream_t s,
                            const std::string& what) override;
  void allGatherInPlace(void* buffer, int64_t shard, DType dt, cudaStream_t s, const std::string& what) override;
  void reduceScatter(const void* send, void* recv, int64_t shard, DType dt, bool average, cudaStream_t s,
                     const std::string& what) override;
  void allGather(const void* send, void* recv, int64_t count, DType dt, cudaStream_t s,
                 const std::string& what) override;
  // Collective (every rank calls it), outside steps and graph capture: rank 0
  // ping-pongs `rounds` times with each other rank (ncclSend/ncclRecv of 8
  // bytes on a stream of its own, the host polling each for completion):
  // rank 0 reads now_ns() as t0, sends; rank r reads tr when the message
  // arrived and answers; rank 0 reads t1 when the answer arrived. The round
  // with the smallest t1 - t0 is kept: offset = (t0 + t1) / 2 - tr. Every
  // rank gets every rank's result (index = rank; rank 0's is zero).
  std::vector<ClockOffset> measureClockOffsets(const std::function<int64_t()>& now_ns, int rounds = 20);
  // Returns once every rank called it (an all-reduce of one value).
  void barrier(const std::string& what);

  void send(const void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) override;
  void recv(void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) override;
  void checkAsync(const std::string& what) override;
  // The abort runs on a detached thread: with a peer gone, ncclCommAbort
  // can itself wait on stuck work, and the caller must still be able to
  // report the error and leave.
  void abort() override;
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  double timeoutSeconds() const { return timeout_s_; }

 private:
  struct State;
  NcclComm(std::unique_ptr<State> state, int rank, int world, double timeout_s);
  using TimePoint = std::chrono::steady_clock::time_point;
  void ensureAux(size_t count);
  // Throws, after aborting, when an issued collective returned an error.
  void checkIssued(int nccl_result, const char* collective, const std::string& what);
  void p2p(bool send, int64_t* buf, size_t count, int peer, const std::string& what, TimePoint deadline);
  void spinIssued(const std::string& what, TimePoint deadline);
  void spinStream(const std::string& what, TimePoint deadline);

  std::unique_ptr<State> state_;
  int rank_;
  int world_;
  double timeout_s_;
};

}  // namespace tandem::cuda
