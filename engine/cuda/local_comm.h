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
// which wakes the others with an error). Eager steps only: a CUDA Graph
// captured on one thread cannot wait on another thread's capture.
//
// Point to point: a send copies its buffer into a staging buffer of the
// (sender, receiver) channel on the sender's stream and returns at once; the
// receive waits on the host for the matching send (first in, first out),
// then copies from the staging buffer on the receiver's stream. A sender
// never waits for its receiver, so pipeline schedules whose sends and
// receives run on separate streams cannot deadlock on the host; staging
// grows to the messages in flight.

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

 private:
  std::shared_ptr<LocalGroup> world_;
  // (name, rank) -> (group, place)
  std::map<std::pair<std::string, int>, std::pair<std::shared_ptr<LocalGroup>, int>> members_;
};

}  // namespace tandem::cuda
