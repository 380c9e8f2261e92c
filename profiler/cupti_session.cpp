// The CUPTI side of the profiler: subscription, activity kinds, the buffer
// pool, completed buffers and the graph-node callbacks.
#include <cupti.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "profiler/profiler_impl.h"
#include "traces/trackers/stats.h"

namespace tandem::profiler {

std::atomic<Profiler::Impl*> g_active{nullptr};

int64_t& currentTask() {
  thread_local int64_t task = -1;
  return task;
}

int& currentStep() {
  thread_local int step = -1;
  return step;
}

int& currentRank() {
  thread_local int rank = -1;
  return rank;
}

namespace {

std::string cuptiMessage(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : fmt::format("CUPTI error {}", int(r));
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    throw ProfilerError(fmt::format(
        "profiler: {} failed: another profiler already holds CUPTI in this process (Nsight Systems, "
        "Nsight Compute, a PyTorch/Kineto profiler or a second tandem profiler); run without it or "
        "without --profile",
        what));
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    throw ProfilerError(fmt::format("profiler: {} failed: insufficient privileges for GPU profiling "
                                    "(NVreg_RestrictProfilingToAdminUsers)",
                                    what));
  throw ProfilerError(fmt::format("profiler: {} failed: {}", what, cuptiMessage(r)));
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  Profiler::Impl* p = g_active.load();
  *max_records = 0;
  if (!p) {
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = p->takeBuffer();
  *size = size_t(p->opt.buffer_bytes);
}

void CUPTIAPI bufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Profiler::Impl* p = g_active.load();
  if (!p) return;  // buffers outlive nothing: the pool frees them at destruction
  p->bufferDone(ctx, stream, buffer, valid);
}

void CUPTIAPI apiCallback(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  auto* p = static_cast<Profiler::Impl*>(user);
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    if (cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED && cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) return;
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    p->onGraphNode(cbid, static_cast<const CUpti_GraphData*>(rd->resourceDescriptor));
    return;
  }
  // A launch call (only those are enabled): remember which task issued it.
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  const int64_t task = currentTask();
  if (task != -1) p->onLaunch(cb->correlationId, task);
  const int step = currentStep();
  if (step >= 0) p->onLaunchStep(cb->correlationId, step);
}

// The runtime and driver calls that put work on a stream: their API records
// carry the external correlation (task id) that tags the work they launch.
const CUpti_CallbackId kRuntimeLaunches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
};
const CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

}  // namespace

void Profiler::Impl::start() {
  Impl* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this))
    throw ProfilerError("profiler: a profiler is already active in this process (CUPTI allows one)");
  try {
    for (int i = 0; i < opt.buffers; ++i) {
      auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, size_t(opt.buffer_bytes)));
      if (!b) throw ProfilerError("profiler: cannot allocate the activity buffer pool");
      all_buffers.push_back(b);
      free_buffers.push_back(b);
    }
    check(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(&apiCallback), this),
          "cuptiSubscribe");
    check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED),
          "enabling the graph node callback");
    check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED),
          "enabling the graph clone callback");
    // Launch callbacks: each launch's correlation id -> the task issuing it.
    // (The external correlation records say the same when CUPTI emits them;
    // the callback does not depend on API activity records being enabled.)
    for (CUpti_CallbackId id : kRuntimeLaunches)
      check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id), "enabling a runtime launch callback");
    for (CUpti_CallbackId id : kDriverLaunches)
      check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id), "enabling a driver launch callback");
    check(cuptiActivityRegisterCallbacks(&bufferRequested, &bufferCompleted), "cuptiActivityRegisterCallbacks");
    // Never CUPTI_ACTIVITY_KIND_KERNEL: it serialises kernels.
    for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                 CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                 CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_MARKER})
      check(cuptiActivityEnable(k), fmt::format("enabling CUPTI activity kind {}", int(k)).c_str());
    if (opt.trace_all_api) {
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enabling runtime API records");
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enabling driver API records");
    } else {
      for (CUpti_CallbackId id : kRuntimeLaunches)
        check(cuptiActivityEnableRuntimeApi(id, 1), "cuptiActivityEnableRuntimeApi");
      for (CUpti_CallbackId id : kDriverLaunches)
        check(cuptiActivityEnableDriverApi(id, 1), "cuptiActivityEnableDriverApi");
    }
    if (opt.flush_period_ms > 0) check(cuptiActivityFlushPeriod(opt.flush_period_ms), "cuptiActivityFlushPeriod");
    started = true;
  } catch (...) {
    if (subscriber) cuptiUnsubscribe(subscriber);
    subscriber = nullptr;
    g_active.store(nullptr);
    throw;
  }
}

void Profiler::Impl::stop() {
  if (!started) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                               CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_MARKER,
                               CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    cuptiActivityDisable(k);
  if (opt.flush_period_ms > 0) cuptiActivityFlushPeriod(0);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (subscriber) cuptiUnsubscribe(subscriber);
  subscriber = nullptr;
  started = false;
}

uint8_t* Profiler::Impl::takeBuffer() {
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (!free_buffers.empty()) {
      uint8_t* b = free_buffers.back();
      free_buffers.pop_back();
      return b;
    }
  }
  // The pool ran dry (records arrive faster than they are written): grow it
  // rather than let CUPTI drop records, and say so in the stats.
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, size_t(opt.buffer_bytes)));
  if (b) {
    ++grown;
    std::lock_guard<std::mutex> lock(pool_mu);
    all_buffers.push_back(b);
  }
  return b;
}

void Profiler::Impl::giveBackBuffer(uint8_t* b) {
  std::lock_guard<std::mutex> lock(pool_mu);
  free_buffers.push_back(b);
}

void Profiler::Impl::bufferDone(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t valid) {
  std::vector<Record> records;
  records.reserve(valid / 64);
  const int64_t n = buffer && valid ? decodeBuffer(buffer, valid, records) : 0;
  size_t dropped_here = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped_here) == CUPTI_SUCCESS) dropped += int64_t(dropped_here);
  if (buffer) giveBackBuffer(buffer);
  std::lock_guard<std::mutex> lock(write_mu);
  if (finished) return;
  summary.records += n;
  try {
    consume(records, false);
    drainHostRows(false);
    writer->flush();  // committed: a rank killed later still leaves these rows readable
  } catch (const std::exception& e) {
    // Never throw into CUPTI's thread; the loss is counted and reported.
    writer->incrementStat(traces::stats::kProfilerWriteErrors.row(1, e.what()));
  }
}

void Profiler::Impl::onLaunch(uint32_t correlation, int64_t task) {
  std::lock_guard<std::mutex> lock(node_mu);
  launch_task[correlation] = task;
  if (manyRanks() && task == kStepWork) launch_rank[correlation] = currentRank();
}

int Profiler::Impl::stepWorkRank(const Record& r) {
  std::lock_guard<std::mutex> lock(node_mu);
  if (r.graph_node != 0) {
    auto it = node_rank.find(r.graph_node);
    return it == node_rank.end() ? -1 : it->second;
  }
  auto it = launch_rank.find(r.correlation);
  return it == launch_rank.end() ? -1 : it->second;
}

void Profiler::Impl::onLaunchStep(uint32_t correlation, int step) {
  std::lock_guard<std::mutex> lock(node_mu);
  launch_step[correlation] = step;
}

int Profiler::Impl::stepOf(uint32_t correlation) {
  {
    std::lock_guard<std::mutex> lock(node_mu);
    if (auto it = launch_step.find(correlation); it != launch_step.end()) return it->second;
  }
  auto it = ext_step.find(correlation);
  return it != ext_step.end() ? it->second : -1;
}

void Profiler::Impl::onGraphNode(CUpti_CallbackId cbid, const CUpti_GraphData* g) {
  if (!g) return;
  uint64_t id = 0;
  if (cuptiGetGraphNodeId(g->node, &id) != CUPTI_SUCCESS) return;
  std::lock_guard<std::mutex> lock(node_mu);
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    const int64_t task = currentTask();
    if (task != -1) node_task[id] = task;
    if (manyRanks() && task == kStepWork) node_rank[id] = currentRank();
  } else {  // cloned at instantiation: the executable graph's node inherits the task
    uint64_t original = 0;
    if (cuptiGetGraphNodeId(g->originalNode, &original) != CUPTI_SUCCESS) return;
    auto it = node_task.find(original);
    if (it != node_task.end()) node_task[id] = it->second;
    if (auto rk = node_rank.find(original); rk != node_rank.end()) node_rank[id] = rk->second;
  }
}

}  // namespace tandem::profiler
