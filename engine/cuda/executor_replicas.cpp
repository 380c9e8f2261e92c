// CudaExecutor's replica check: fingerprints on the device, gathered over
// the data-parallel group (engine/cuda/executor.h).
#include <algorithm>

#include "engine/cuda/executor.h"
#include "engine/cuda/executor_impl.h"
#include "engine/cuda/kernels.h"

namespace tandem::cuda {
namespace {

// The data-parallel group holding `rank`, if there is one of two or more.
const ProcessGroup* dataParallelGroup(const Plan& plan, int rank) {
  for (const ProcessGroup& g : plan.groups)
    if (g.name == "dp" && g.ranks.size() > 1 && std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end())
      return &g;
  return nullptr;
}

// Device memory for the duration of one check.
struct DeviceScratch {
  void* p = nullptr;
  explicit DeviceScratch(size_t bytes) { TANDEM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 8))); }
  ~DeviceScratch() { cudaFree(p); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

}  // namespace

std::optional<checkpoint::ReplicaMismatch> CudaExecutor::checkReplicas() {
  Impl& m = *impl_;
  TANDEM_CUDA_CHECK(cudaSetDevice(m.opt.device));
  const ProcessGroup* group = dataParallelGroup(m.plan, m.opt.rank);
  const std::vector<int> ids = checkpoint::replicatedBuffers(m.plan, m.opt.rank);
  if (!group || ids.empty()) return std::nullopt;
  Communicator* comm = nullptr;
  if (const auto it = m.group_comms.find(group->name); it != m.group_comms.end())
    comm = it->second.get();
  else if (int(group->ranks.size()) == m.plan.world_size)
    comm = m.comm.get();
  if (!comm) throw CudaError("replica check: no communicator of the data-parallel group");
  const size_t n = ids.size(), members = group->ranks.size();
  DeviceScratch mine(n * sizeof(uint64_t)), all(n * members * sizeof(uint64_t));
  cudaStream_t s = m.streams[0];
  // The step's writes are done (this rank's streams only: ranks sharing the
  // GPU each check from their own thread).
  for (cudaStream_t x : m.streams) TANDEM_CUDA_CHECK(cudaStreamSynchronize(x));
  auto* hashes = static_cast<uint64_t*>(mine.p);
  for (size_t i = 0; i < n; ++i) {
    const Buffer& b = m.program->buffers.at(size_t(ids[i]));
    replicaHash(m.ptr(ids[i]), b.bytes, hashes + i, s);
  }
  // Each hash as two 32-bit words: the gather moves bytes, it adds nothing.
  comm->allGather(mine.p, all.p, int64_t(2 * n), DType::I32, s, "replica check");
  std::vector<uint64_t> host(n * members);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data(), all.p, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, s));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(s));
  comm->checkAsync("replica check");
  // Every member gathered the same hashes, so every member names the same
  // mismatch (and stops alike).
  for (size_t place = 1; place < members; ++place)
    for (size_t i = 0; i < n; ++i) {
      const uint64_t have = host[place * n + i], want = host[i];
      if (have == want) continue;
      return checkpoint::replicaMismatch(group->name, group->ranks[place], group->ranks[0],
                                         m.program->buffers.at(size_t(ids[i])).name, have, want);
    }
  return std::nullopt;
}

void CudaExecutor::flipBit(int buffer, int64_t bit) {
  Impl& m = *impl_;
  TANDEM_CUDA_CHECK(cudaSetDevice(m.opt.device));
  const Buffer& b = m.program->buffers.at(size_t(buffer));
  if (bit < 0 || bit >= b.bytes * 8) throw std::out_of_range("flipBit: bit outside the buffer");
  for (cudaStream_t x : m.streams) TANDEM_CUDA_CHECK(cudaStreamSynchronize(x));
  auto* at = static_cast<unsigned char*>(m.ptr(buffer)) + bit / 8;
  unsigned char byte = 0;
  TANDEM_CUDA_CHECK(cudaMemcpy(&byte, at, 1, cudaMemcpyDeviceToHost));
  byte = static_cast<unsigned char>(byte ^ (1u << (bit % 8)));
  TANDEM_CUDA_CHECK(cudaMemcpy(at, &byte, 1, cudaMemcpyHostToDevice));
}

}  // namespace tandem::cuda
