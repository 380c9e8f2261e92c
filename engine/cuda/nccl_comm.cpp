#include "engine/cuda/nccl_comm.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/cuda/check.h"

namespace tandem::cuda {

struct NcclComm::State {
  ncclComm_t comm = nullptr;
  bool aborted = false;
  // Clock measurement and barrier: a stream and a small device buffer of their own.
  cudaStream_t aux = nullptr;
  int64_t* aux_buf = nullptr;
  size_t aux_count = 0;
};

namespace {

ncclDataType_t ncclType(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::F8: return ncclUint8;  // never communicated: FP8 plans are refused (gpu_support.h)
    case DType::U8: return ncclUint8;  // dropout masks: never communicated
  }
  return ncclFloat32;
}

}  // namespace

NcclId makeNcclId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) throw CudaError(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  NcclId out;
  static_assert(sizeof(id) == sizeof(NcclId));
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclComm::NcclComm(const NcclId& id, int rank, int world, double timeout_s)
    : state_(std::make_unique<State>()), rank_(rank), world_(world), timeout_s_(timeout_s) {
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&state_->comm, world, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw CudaError("rank " + std::to_string(rank) + ": NCCL communicator init failed: " +
                    ncclGetErrorString(r));
  checkAsync("communicator init");
}

NcclComm::NcclComm(std::unique_ptr<State> state, int rank, int world, double timeout_s)
    : state_(std::move(state)), rank_(rank), world_(world), timeout_s_(timeout_s) {}

std::unique_ptr<NcclComm> NcclComm::split(int color, int key) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before a split");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto state = std::make_unique<State>();
  ncclResult_t r = ncclCommSplit(state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &state->comm, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator split failed: " + ncclGetErrorString(r));
  checkAsync("communicator split");
  if (color < 0 || !state->comm) return nullptr;
  // The new communicator's own init may still be in progress (non-blocking).
  int count = 0, place = 0;
  auto comm = std::unique_ptr<NcclComm>(new NcclComm(std::move(state), 0, 0, timeout_s_));
  comm->checkAsync("communicator split");
  if (ncclCommCount(comm->state_->comm, &count) != ncclSuccess ||
      ncclCommUserRank(comm->state_->comm, &place) != ncclSuccess)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL split communicator has no size");
  comm->rank_ = place;
  comm->world_ = count;
  return comm;
}

NcclComm::~NcclComm() {
  if (!state_->comm) return;
  if (state_->aborted) return;
  // A clean shutdown would wait for peers; abort never blocks and frees the same resources.
  ncclCommAbort(state_->comm);
  if (state_->aux_buf) cudaFree(state_->aux_buf);
  if (state_->aux) cudaStreamDestroy(state_->aux);
}

void NcclComm::abort() {
  if (state_->comm && !state_->aborted) {
    state_->aborted = true;
    ncclComm_t c = state_->comm;
    std::thread([c] { ncclCommAbort(c); }).detach();
  }
}

void NcclComm::checkAsync(const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(state_->comm, &async);
    if (r != ncclSuccess) async = r;
    if (async == ncclSuccess) return;
    if (async != ncclInProgress) {
      std::string detail = ncclGetErrorString(async);
      const char* last = ncclGetLastError(state_->comm);
      if (last && *last) detail += std::string(" (") + last + ")";
      abort();
      throw CudaError("rank " + std::to_string(rank_) + ": NCCL error in " + what + ": " + detail +
                      "; communicator aborted");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      abort();
      throw CudaError("rank " + std::to_string(rank_) + ": NCCL " + what + " did not complete within " +
                      std::to_string(int(timeout_s_)) + " s (a peer rank may have stopped); communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NcclComm::allReduce(const void* send, void* recv, int64_t count, DType dt, bool average,
                         cudaStream_t s, const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  ncclResult_t r = ncclAllReduce(send, recv, size_t(count), ncclType(dt), average ? ncclAvg : ncclSum,
                                 state_->comm, s);
  checkIssued(r, "all-reduce", what);
}

void NcclComm::reduceScatterInPlace(void* buffer, int64_t shard, DType dt, bool average, cudaStream_t s,
                                    const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  // NCCL's in-place form: the receive buffer is this rank's part of the send buffer.
  char* base = static_cast<char*>(buffer);
  void* mine = base + size_t(rank_) * size_t(shard) * dtypeSize(dt);
  checkIssued(ncclReduceScatter(buffer, mine, size_t(shard), ncclType(dt), average ? ncclAvg : ncclSum,
                                state_->comm, s),
              "reduce-scatter", what);
}

void NcclComm::reduceScatter(const void* send, void* recv, int64_t shard, DType dt, bool average, cudaStream_t s,
                             const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  checkIssued(ncclReduceScatter(send, recv, size_t(shard), ncclType(dt), average ? ncclAvg : ncclSum,
                                state_->comm, s),
              "reduce-scatter", what);
}

void NcclComm::allGatherInPlace(void* buffer, int64_t shard, DType dt, cudaStream_t s, const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  char* base = static_cast<char*>(buffer);
  const void* mine = base + size_t(rank_) * size_t(shard) * dtypeSize(dt);
  checkIssued(ncclAllGather(mine, buffer, size_t(shard), ncclType(dt), state_->comm, s), "all-gather", what);
}

void NcclComm::allGather(const void* send, void* recv, int64_t count, DType dt, cudaStream_t s,
                         const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  checkIssued(ncclAllGather(send, recv, size_t(count), ncclType(dt), state_->comm, s), "all-gather", what);
}

void NcclComm::send(const void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  checkIssued(ncclSend(buf, size_t(count), ncclType(dt), peer, state_->comm, s), "send", what);
}

void NcclComm::recv(void* buf, int64_t count, DType dt, int peer, cudaStream_t s, const std::string& what) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  checkIssued(ncclRecv(buf, size_t(count), ncclType(dt), peer, state_->comm, s), "receive", what);
}

void NcclComm::checkIssued(int nccl_result, const char* collective, const std::string& what) {
  const auto r = ncclResult_t(nccl_result);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL " + collective + " " + what + " failed: " +
                    ncclGetErrorString(r) + "; communicator aborted");
  }
  checkAsync(std::string(collective) + " " + what);
}

namespace {

using Clock = std::chrono::steady_clock;

void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

// Busy-polls (no sleep): the clock measurement times these waits.
void NcclComm::spinIssued(const std::string& what, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(state_->comm, &async);
    if (r != ncclSuccess) async = r;
    if (async == ncclSuccess) return;
    if (async != ncclInProgress || Clock::now() > deadline) {
      checkAsync(what);  // names the error, or waits out the normal timeout and aborts
      return;
    }
  }
}

void NcclComm::spinStream(const std::string& what, Clock::time_point deadline) {
  for (uint64_t i = 0;; ++i) {
    const cudaError_t e = cudaStreamQuery(state_->aux);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      abort();
      throw CudaError("rank " + std::to_string(rank_) + ": " + what + " failed: " + cudaGetErrorString(e) +
                      "; communicator aborted");
    }
    if ((i & 1023) == 1023) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(state_->comm, &async);
      if ((async != ncclSuccess && async != ncclInProgress) || Clock::now() > deadline) {
        abort();
        throw CudaError("rank " + std::to_string(rank_) + ": NCCL " + what + " did not complete within " +
                        std::to_string(int(timeout_s_)) + " s (a peer rank may have stopped); communicator aborted");
      }
    }
  }
}

void NcclComm::ensureAux(size_t count) {
  if (!state_->aux) cudaCheck(cudaStreamCreateWithFlags(&state_->aux, cudaStreamNonBlocking), "clock stream");
  if (state_->aux_count >= count) return;
  if (state_->aux_buf) cudaCheck(cudaFree(state_->aux_buf), "clock buffer");
  state_->aux_buf = nullptr;
  cudaCheck(cudaMalloc(&state_->aux_buf, count * sizeof(int64_t)), "clock buffer");
  state_->aux_count = count;
}

void NcclComm::p2p(bool send, int64_t* buf, size_t count, int peer, const std::string& what,
                   Clock::time_point deadline) {
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  ncclResult_t r = send ? ncclSend(buf, count, ncclInt64, peer, state_->comm, state_->aux)
                        : ncclRecv(buf, count, ncclInt64, peer, state_->comm, state_->aux);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL " + what + " failed: " + ncclGetErrorString(r) +
                    "; communicator aborted");
  }
  spinIssued(what, deadline);
}

std::vector<ClockOffset> NcclComm::measureClockOffsets(const std::function<int64_t()>& now_ns, int rounds) {
  if (rounds < 1) rounds = 1;
  std::vector<ClockOffset> out(static_cast<size_t>(world_));
  for (auto& o : out) o.rounds = rounds;
  if (world_ == 1) {
    out[0].local_ns = now_ns();
    return out;
  }
  const int total = rounds + 1;  // round 0 warms the connection up and is not kept
  ensureAux(size_t(std::max(total, 3 * world_)));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_ * 2));
  int64_t* dev = state_->aux_buf;
  // Per peer on rank 0: (rtt, offset, peer's local time) of the kept round.
  std::vector<int64_t> result(static_cast<size_t>(3 * world_), 0);
  result[2] = now_ns();
  for (int peer = 1; peer < world_; ++peer) {
    if (rank_ != 0 && rank_ != peer) continue;
    const std::string what = "clock ping-pong with rank " + std::to_string(rank_ == 0 ? peer : 0);
    std::vector<int64_t> t0(static_cast<size_t>(total)), t1(t0), tr(t0);
    for (int k = 0; k < total; ++k) {
      if (rank_ == 0) {
        t0[k] = now_ns();
        p2p(true, dev, 1, peer, what, deadline);
        p2p(false, dev + 1, 1, peer, what, deadline);
        spinStream(what, deadline);
        t1[k] = now_ns();
      } else {
        p2p(false, dev, 1, 0, what, deadline);
        spinStream(what, deadline);
        tr[k] = now_ns();
        p2p(true, dev + 1, 1, 0, what, deadline);
        spinStream(what, deadline);
      }
    }
    // The peer's readings go to rank 0 once all rounds are done (never inside one).
    if (rank_ == peer) {
      cudaCheck(cudaMemcpyAsync(dev, tr.data(), sizeof(int64_t) * size_t(total), cudaMemcpyHostToDevice, state_->aux),
            "clock readings copy");
      p2p(true, dev, size_t(total), 0, what, deadline);
      spinStream(what, deadline);
    } else {
      p2p(false, dev, size_t(total), peer, what, deadline);
      spinStream(what, deadline);  // before the copy: a copy to pageable memory would block without a deadline
      cudaCheck(cudaMemcpy(tr.data(), dev, sizeof(int64_t) * size_t(total), cudaMemcpyDeviceToHost),
                "clock readings copy");
      int best = 1;
      for (int k = 2; k < total; ++k)
        if (t1[k] - t0[k] < t1[best] - t0[best]) best = k;
      result[size_t(3 * peer)] = t1[best] - t0[best];
      result[size_t(3 * peer + 1)] = t0[best] + (t1[best] - t0[best]) / 2 - tr[best];
      result[size_t(3 * peer + 2)] = tr[best];
    }
  }
  // Everyone gets everyone's figures.
  if (rank_ == 0)
    cudaCheck(cudaMemcpyAsync(dev, result.data(), sizeof(int64_t) * result.size(), cudaMemcpyHostToDevice, state_->aux),
          "clock results copy");
  {
    ncclResult_t r = ncclBroadcast(dev, dev, result.size(), ncclInt64, 0, state_->comm, state_->aux);
    if (r != ncclSuccess && r != ncclInProgress) {
      abort();
      throw CudaError("rank " + std::to_string(rank_) + ": NCCL broadcast of the clock offsets failed: " +
                      ncclGetErrorString(r) + "; communicator aborted");
    }
    spinIssued("broadcast of the clock offsets", deadline);
  }
  spinStream("broadcast of the clock offsets", deadline);
  cudaCheck(cudaMemcpy(result.data(), dev, sizeof(int64_t) * result.size(), cudaMemcpyDeviceToHost),
            "clock results copy");
  for (int r = 0; r < world_; ++r) {
    out[size_t(r)].rtt_ns = result[size_t(3 * r)];
    out[size_t(r)].offset_ns = result[size_t(3 * r + 1)];
    out[size_t(r)].local_ns = result[size_t(3 * r + 2)];
  }
  return out;
}

void NcclComm::barrier(const std::string& what) {
  ensureAux(3);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  if (state_->aborted)
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL communicator was aborted before " + what);
  ncclResult_t r = ncclAllReduce(state_->aux_buf, state_->aux_buf, 1, ncclInt64, ncclSum, state_->comm, state_->aux);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL " + what + " failed: " + ncclGetErrorString(r) +
                    "; communicator aborted");
  }
  spinIssued(what, deadline);
  spinStream(what, deadline);
}

}  // namespace tandem::cuda
