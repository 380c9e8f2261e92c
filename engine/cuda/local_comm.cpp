#include "engine/cuda/local_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "engine/cuda/check.h"
#include "engine/cuda/local_collectives.h"

namespace tandem::cuda {

// The members' meeting point: each collective is two meetings (all arrived;
// the kernel issued), with member 0 issuing the kernel in between.
class LocalGroup {
 public:
  LocalGroup(int size, double timeout_s) : size_(size), timeout_s_(timeout_s), calls_(size_t(size)) {
    if (size < 1 || size > kMaxLocalRanks)
      throw CudaError(fmt::format("--ranks-per-gpu: a group of {} ranks on one GPU; at most {} share one", size,
                                  kMaxLocalRanks));
    for (int i = 0; i < size; ++i) {
      cudaEvent_t e;
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      ready_.push_back(e);
    }
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~LocalGroup() {
    for (cudaEvent_t e : ready_) cudaEventDestroy(e);
    cudaEventDestroy(done_);
    for (auto& [ends, channel] : channels_)
      for (Slot& slot : channel.slots) {
        cudaFree(slot.mem);
        cudaEventDestroy(slot.filled);
        cudaEventDestroy(slot.consumed);
      }
  }
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  struct Call {
    LocalOp op = LocalOp::AllReduce;
    int64_t count = 0;
    DType dt = DType::F32;
    bool average = false;
    const void* in = nullptr;
    void* out = nullptr;
    std::string what;
  };

  int size() const { return size_; }

  void collective(int place, const Call& call, cudaStream_t s) {
    check(place, call.what);
    TANDEM_CUDA_CHECK(cudaEventRecord(ready_[size_t(place)], s));
    {
      std::lock_guard<std::mutex> lk(mu_);
      calls_[size_t(place)] = call;
    }
    meet(place, call.what);
    if (place == 0) {
      try {
        issue(s);
      } catch (const std::exception& e) {
        abort(e.what());
        throw;
      }
    }
    meet(place, call.what);
    if (place != 0) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, done_, 0));
  }

  // The sender's half: into a free staging slot of the channel (a new one
  // when none is free and large enough), on the sender's stream.
  void send(int place, int peer, const void* buf, int64_t bytes, cudaStream_t s, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_) throw CudaError(fmt::format("rank {} of an in-process group: {} not run: {}", place, what, why_));
    Channel& ch = channels_[{place, peer}];
    size_t k = 0;
    while (k < ch.slots.size() && (ch.slots[k].busy || ch.slots[k].bytes < bytes)) ++k;
    if (k == ch.slots.size()) {
      Slot slot;
      slot.bytes = bytes;
      TANDEM_CUDA_CHECK(cudaMalloc(&slot.mem, size_t(std::max<int64_t>(bytes, 1))));
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&slot.filled, cudaEventDisableTiming));
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&slot.consumed, cudaEventDisableTiming));
      ch.slots.push_back(slot);
    }
    Slot& slot = ch.slots[k];
    // Its previous message was copied out by a receive already issued.
    if (slot.used) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, slot.consumed, 0));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(slot.mem, buf, size_t(bytes), cudaMemcpyDeviceToDevice, s));
    TANDEM_CUDA_CHECK(cudaEventRecord(slot.filled, s));
    slot.busy = slot.used = true;
    ch.queue.push_back({int(k), bytes, what});
    cv_.notify_all();
  }

  // The receiver's half: waits on the host for the channel's next message.
  void recv(int place, int peer, void* buf, int64_t bytes, cudaStream_t s, const std::string& what) {
    std::unique_lock<std::mutex> lk(mu_);
    Channel& ch = channels_[{peer, place}];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                 std::chrono::duration<double>(timeout_s_));
    const bool arrived = cv_.wait_until(lk, deadline, [&] { return !ch.queue.empty() || aborted_; });
    if (!arrived && !aborted_) {
      aborted_ = true;
      why_ = fmt::format("place {} sent nothing for {} within {:.0f} s", peer, what, timeout_s_);
      cv_.notify_all();
    }
    if (aborted_) throw CudaError(fmt::format("rank {} of an in-process group: {} not run: {}", place, what, why_));
    const Message m = ch.queue.front();
    ch.queue.pop_front();
    if (m.bytes != bytes) {
      aborted_ = true;
      why_ = fmt::format("{} receives {} bytes where place {} sent {} ({})", what, bytes, peer, m.bytes, m.what);
      cv_.notify_all();
      throw CudaError(fmt::format("rank {} of an in-process group: {}", place, why_));
    }
    Slot& slot = ch.slots[size_t(m.slot)];
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, slot.filled, 0));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(buf, slot.mem, size_t(bytes), cudaMemcpyDeviceToDevice, s));
    TANDEM_CUDA_CHECK(cudaEventRecord(slot.consumed, s));
    slot.busy = false;
  }

  // Returns once every member called it (the host threads' meeting of the
  // shared CUDA Graph's capture and replays).
  void barrier(int place, const std::string& what) { meet(place, what); }

  // Called with the GPU idle, before the ranks capture their step: no
  // staging slot's previous message is still being copied out, and the
  // receives' events recorded outside the capture must not be waited on
  // inside it.
  void forgetConsumed() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [ends, channel] : channels_)
      for (Slot& slot : channel.slots) slot.used = false;
  }

  void check(int place, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_) throw CudaError(fmt::format("rank {} of an in-process group: {} not run: {}", place, what, why_));
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!aborted_) why_ = why;
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  // Member 0, once all arrived: the same collective everywhere, then one
  // kernel after every member's stream reached it.
  void issue(cudaStream_t s) {
    const Call& c0 = calls_[0];
    LocalBuffers b;
    for (int m = 0; m < size_; ++m) {
      const Call& c = calls_[size_t(m)];
      if (c.op != c0.op || c.count != c0.count || c.dt != c0.dt || c.average != c0.average)
        throw CudaError(fmt::format("in-process collective mismatch: rank 0 of the group issues {} ({} elements), "
                                    "rank {} issues {} ({} elements)",
                                    c0.what, c0.count, m, c.what, c.count));
      b.in[m] = c.in;
      b.out[m] = c.out;
      if (m > 0) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, ready_[size_t(m)], 0));
    }
    localCollective(c0.op, b, size_, c0.count, c0.dt, c0.average, s);
    TANDEM_CUDA_CHECK(cudaEventRecord(done_, s));
  }

  // Returns once every member called it; throws on abort or after the timeout.
  void meet(int place, const std::string& what) {
    std::unique_lock<std::mutex> lk(mu_);
    if (aborted_) throw CudaError(fmt::format("rank {} of an in-process group: {} not run: {}", place, what, why_));
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                 std::chrono::duration<double>(timeout_s_));
    const bool met = cv_.wait_until(lk, deadline, [&] { return generation_ != generation || aborted_; });
    if (met && generation_ != generation) return;
    if (!met && !aborted_) {
      aborted_ = true;
      why_ = fmt::format("{} of {} ranks did not reach {} within {:.0f} s", size_ - arrived_, size_, what,
                         timeout_s_);
      cv_.notify_all();
    }
    throw CudaError(fmt::format("rank {} of an in-process group: {} not run: {}", place, what, why_));
  }

  const int size_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string why_;
  std::vector<Call> calls_;
  std::vector<cudaEvent_t> ready_;
  cudaEvent_t done_ = nullptr;
  // Point to point: one channel per (sender, receiver) place pair.
  struct Slot {
    void* mem = nullptr;
    int64_t bytes = 0;
    cudaEvent_t filled = nullptr, consumed = nullptr;
    bool busy = false;  // holds a message not yet received
    bool used = false;  // consumed was recorded at least once
  };
  struct Message {
    int slot = 0;
    int64_t bytes = 0;
    std::string what;
  };
  struct Channel {
    std::vector<Slot> slots;
    std::deque<Message> queue;
  };
  std::map<std::pair<int, int>, Channel> channels_;
};

LocalComm::LocalComm(std::shared_ptr<LocalGroup> group, int place) : group_(std::move(group)), place_(place) {}

int LocalComm::world() const { return group_->size(); }

void LocalComm::allReduce(const void* send, void* recv, int64_t count, DType dt, bool average, cudaStream_t s,
                          const std::string& what) {
  group_->collective(place_, {LocalOp::AllReduce, count, dt, average, send, recv, what}, s);
}

void LocalComm::reduceScatterInPlace(void* buffer, int64_t shard, DType dt, bool average, cudaStream_t s,
                                     const std::string& what) {
  group_->collective(place_, {LocalOp::ReduceScatterInPlace, shard, dt, average, buffer, buffer, what}, s);
}

void LocalComm::allGatherInPlace(void* buffer, int64_t shard, DType dt, cudaStream_t s, const std::string& what) {
  group_->collective(place_, {LocalOp::AllGatherInPlace, shard, dt, false, buffer, buffer, what}, s);
}

void LocalComm::reduceScatter(const void* send, void* recv, int64_t shard, DType dt, bool average, cudaStream_t s,
                              const std::string& what) {
  group_->collective(place_, {LocalOp::ReduceScatter, shard, dt, average, send, recv, what}, s);
}

void LocalComm::allGather(const void* send, void* recv, int64_t count, DType dt, cudaStream_t s,
                          const std::string& what) {
  group_->collective(place_, {LocalOp::AllGather, count, dt, false, send, recv, what}, s);
}

void LocalComm::send(const void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) {
  group_->send(place_, peer, buf, count * int64_t(dtypeSize(dt)), s, what);
}

void LocalComm::recv(void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) {
  group_->recv(place_, peer, buf, count * int64_t(dtypeSize(dt)), s, what);
}

void LocalComm::checkAsync(const std::string& what) { group_->check(place_, what); }

void LocalComm::abort() { group_->abort(fmt::format("rank {} of the group stopped", place_)); }

LocalWorld::LocalWorld(const Plan& plan, int device, double timeout_s) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  world_ = std::make_shared<LocalGroup>(plan.world_size, timeout_s);
  for (const ProcessGroup& g : plan.groups) {
    auto group = std::make_shared<LocalGroup>(int(g.ranks.size()), timeout_s);
    for (size_t i = 0; i < g.ranks.size(); ++i)
      if (!members_.emplace(std::pair{g.name, g.ranks[i]}, std::pair{group, int(i)}).second)
        throw CudaError(fmt::format("rank {} is in two process groups named '{}'", g.ranks[i], g.name));
  }
}

LocalWorld::~LocalWorld() {
  if (shared_graph_) cudaGraphExecDestroy(shared_graph_);
  if (capture_fork_) cudaEventDestroy(capture_fork_);
  if (replay_done_) cudaEventDestroy(replay_done_);
  for (cudaEvent_t e : rank_done_) cudaEventDestroy(e);
}

std::vector<std::shared_ptr<LocalGroup>> LocalWorld::groups() const {
  std::vector<std::shared_ptr<LocalGroup>> out{world_};
  for (const auto& [key, member] : members_)
    if (std::find(out.begin(), out.end(), member.first) == out.end()) out.push_back(member.first);
  return out;
}

void LocalWorld::beginSharedCapture(int rank, cudaStream_t first) {
  world_->barrier(rank, "the step graph's capture");
  if (rank == 0) {
    try {
      if (shared_graph_) throw CudaError("in-process ranks: the step graph was captured already");
      TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& g : groups()) g->forgetConsumed();
      if (!capture_fork_) {
        TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&capture_fork_, cudaEventDisableTiming));
        TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&replay_done_, cudaEventDisableTiming));
        rank_done_.assign(size_t(world_->size()), nullptr);
        for (cudaEvent_t& e : rank_done_) TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
      // Relaxed: the channels allocate staging buffers while the ranks'
      // threads capture (a first send of its size).
      TANDEM_CUDA_CHECK(cudaStreamBeginCapture(first, cudaStreamCaptureModeRelaxed));
      TANDEM_CUDA_CHECK(cudaEventRecord(capture_fork_, first));
    } catch (const std::exception& e) {
      abort(e.what());
      throw;
    }
  }
  world_->barrier(rank, "the step graph's capture");
  if (rank != 0) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(first, capture_fork_, 0));
}

void LocalWorld::atRankZeroAfterAll(int rank, cudaStream_t first, const std::string& what,
                                    const std::function<void()>& issue) {
  if (rank != 0) TANDEM_CUDA_CHECK(cudaEventRecord(rank_done_[size_t(rank)], first));
  world_->barrier(rank, what);
  if (rank != 0) return;
  try {
    for (size_t r = 1; r < rank_done_.size(); ++r) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(first, rank_done_[r], 0));
    issue();
  } catch (const std::exception& e) {
    abort(e.what());
    throw;
  }
}

void LocalWorld::endSharedCapture(int rank, cudaStream_t first) {
  atRankZeroAfterAll(rank, first, "the end of the step graph's capture", [&] {
    cudaGraph_t g = nullptr;
    TANDEM_CUDA_CHECK(cudaStreamEndCapture(first, &g));
    const cudaError_t made = cudaGraphInstantiate(&shared_graph_, g, 0);
    cudaGraphDestroy(g);
    TANDEM_CUDA_CHECK(made);
  });
  world_->barrier(rank, "the step graph's instantiation");
}

void LocalWorld::abortSharedCapture(int rank, cudaStream_t first, const std::string& why) {
  abort(fmt::format("rank {} could not issue its step into the graph: {}", rank, why));
  if (rank == 0) {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(first, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError();
  }
}

void LocalWorld::launchShared(int rank, cudaStream_t first) {
  atRankZeroAfterAll(rank, first, "a step graph's launch", [&] {
    TANDEM_CUDA_CHECK(cudaGraphLaunch(shared_graph_, first));
    TANDEM_CUDA_CHECK(cudaEventRecord(replay_done_, first));
  });
  // Rank 0 records replay_done_ again only after every rank passed this
  // meeting and the next launch's first one.
  world_->barrier(rank, "a step graph's launch");
  if (rank != 0) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(first, replay_done_, 0));
}

std::unique_ptr<Communicator> LocalWorld::world(int rank) const { return std::make_unique<LocalComm>(world_, rank); }

std::unique_ptr<Communicator> LocalWorld::group(const std::string& name, int rank) const {
  const auto it = members_.find({name, rank});
  if (it == members_.end()) return nullptr;
  return std::make_unique<LocalComm>(it->second.first, it->second.second);
}

void LocalWorld::abort(const std::string& why) {
  world_->abort(why);
  for (auto& [key, member] : members_) member.first->abort(why);
}

}  // namespace tandem::cuda
