#include "engine/cuda/nccl_comm.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "engine/cuda/check.h"

namespace tandem::cuda {

struct NcclComm::State {
  ncclComm_t comm = nullptr;
  bool aborted = false;
};

namespace {

ncclDataType_t ncclType(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
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

NcclComm::~NcclComm() {
  if (!state_->comm) return;
  if (state_->aborted) return;
  // A clean shutdown would wait for peers; abort never blocks and frees the same resources.
  ncclCommAbort(state_->comm);
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
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    throw CudaError("rank " + std::to_string(rank_) + ": NCCL all-reduce " + what + " failed: " +
                    ncclGetErrorString(r) + "; communicator aborted");
  }
  checkAsync("all-reduce " + what);
}

}  // namespace tandem::cuda
