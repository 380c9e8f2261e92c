#pragma once
// Several ranks on one GPU in one process (`tandem run --ranks-per-gpu`):
// each rank's executor runs on a host thread of its own, and a collective
// over a group of them is one kernel that reads every member's buffer and
// writes every member's result (sums in rank order, in fp32), ordered
// after each member's stream has reached the collective and before any
// member's stream goes past it. It exists to check multi-rank plans where
// one GPU is at hand and to debug big layouts at small size; the NCCL path
// (nccl_comm.h) is the production one, and the executor is the same.
//
// Issue order: every member's thread calls the group's collectives in the
// same order (as NCCL requires); a call returns once every member has made
// it, so host threads meet at each collective (a member that never comes
// is reported after the timeout, and a member that fails aborts the group,
// which wakes the others with an error).
//
// CUDA Graph steps: a graph captured on one thread cannot wait on work
// another thread captures into a graph of its own, so the ranks capture one
// graph together (LocalWorld::beginSharedCapture): rank 0 begins a capture on
// its first stream and the others' first streams join it through an event;
// every rank then issues its step as in eager mode, the collectives' and
// channels' events becoming edges of the one graph; the ranks' streams join
// rank 0's again before it ends the capture. A step is then rank 0
// launching that graph after every rank's scalar copy, the others' streams
// waiting for it (launchShared).
//
// Point to point: a send copies its buffer into a staging buffer of the
// (sender, receiver) channel on the sender's stream and returns at once; the
// receive waits on the host for the matching send (first in, first out),
// then copies from the staging buffer on the receiver's stream. A sender
// never waits for its receiver, so pipeline schedules whose sends and
// receives run on separate streams cannot deadlock on the host; staging
// grows to the messages in flight.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/communicator.h"
#include "engine/plan/plan.h"

namespace tandem::cuda {

class LocalGroup;

// One member's handle on a LocalGroup.
class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<LocalGroup> group, int place);

  void allReduce(const void* send, void* recv, int64_t count, DType dt, bool average, cudaStream_t s,
                 const std::string& what) override;
  void reduceScatterInPlace(void* buffer, int64_t shard, DType dt, bool average, cudaStream_t s,
                            const std::string& what) override;
  void allGatherInPlace(void* buffer, int64_t shard, DType dt, cudaStream_t s, const std::string& what) override;
  void reduceScatter(const void* send, void* recv, int64_t shard, DType dt, bool average, cudaStream_t s,
                     const std::string& what) override;
  void allGather(const void* send, void* recv, int64_t count, DType dt, cudaStream_t s,
                 const std::string& what) override;
  void send(const void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) override;
  void recv(void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) override;
  void checkAsync(const std::string& what) override;
  void abort() override;
  int rank() const override { return place_; }
  int world() const override;

 private:
  std::shared_ptr<LocalGroup> group_;
  int place_;
};

// Every communicator of a plan's ranks in this process: the world's, and
// one per process group (Plan::groups). Made once, before the ranks'
// executors, on the GPU they share; shared by them.
class LocalWorld {
 public:
  LocalWorld(const Plan& plan, int device, double timeout_s);
  ~LocalWorld();
  // Rank `rank`'s communicator over every rank, or over its group named
  // `group` (nullptr when the rank is in no group of that name).
  std::unique_ptr<Communicator> world(int rank) const;
  std::unique_ptr<Communicator> group(const std::string& name, int rank) const;
  // Wakes every member waiting in a collective with an error (a rank failed).
  void abort(const std::string& why);

  // The step graph of every rank (see above). Every rank calls, on its own
  // thread and with its first stream: beginSharedCapture, then issues its
  // step, then endSharedCapture (rank 0 instantiates the graph; every rank
  // returns once it is ready). A rank whose step failed to issue calls
  // abortSharedCapture instead, which also wakes the others.
  void beginSharedCapture(int rank, cudaStream_t first);
  void endSharedCapture(int rank, cudaStream_t first);
  void abortSharedCapture(int rank, cudaStream_t first, const std::string& why);
  // One replay: `first` of every rank waits for what was issued on it
  // before (the step's scalars) and is ordered after the replay on return.
  void launchShared(int rank, cudaStream_t first);

 private:
  std::vector<std::shared_ptr<LocalGroup>> groups() const;
  // Every rank's `first` reached this point (an event each), then rank 0
  // runs `issue` with its `first` ordered after all of them; a failure
  // there aborts the ranks.
  void atRankZeroAfterAll(int rank, cudaStream_t first, const std::string& what, const std::function<void()>& issue);
  std::shared_ptr<LocalGroup> world_;
  cudaEvent_t capture_fork_ = nullptr;
  std::vector<cudaEvent_t> rank_done_;  // per rank: its part of the capture, or its scalars copied
  cudaEvent_t replay_done_ = nullptr;
  cudaGraphExec_t shared_graph_ = nullptr;
  // (name, rank) -> (group, place)
  std::map<std::pair<std::string, int>, std::pair<std::shared_ptr<LocalGroup>, int>> members_;
};

}  // namespace tandem::cuda
