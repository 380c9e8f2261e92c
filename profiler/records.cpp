#include "profiler/records.h"

#include <cupti.h>

#include <algorithm>
#include <string_view>

namespace tandem::profiler {

namespace {

std::string_view memcpyKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "Memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "Memcpy PtoP";
    default: return "Memcpy";
  }
}

std::string_view syncName(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return "synchronization";
  }
}

// The fields kernel, memcpy and memset records share (distinct CUPTI structs
// with the same member names).
template <class GpuRecord>
void takeGpuTiming(Record& r, const GpuRecord* g) {
  r.start = g->start;
  r.end = g->end;
  r.device = g->deviceId;
  r.stream = g->streamId;
  r.correlation = g->correlationId;
  r.graph_node = g->graphNodeId;
}

}  // namespace

bool isNcclKernel(const std::string& name) {
  return name.rfind("ncclDevKernel", 0) == 0 || name.rfind("ncclKernel", 0) == 0 ||
         name.find("nccl") != std::string::npos;
}

int64_t decodeBuffer(uint8_t* buffer, size_t valid_bytes, std::vector<Record>& out) {
  int64_t n = 0;
  CUpti_Activity* a = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &a) == CUPTI_SUCCESS) {
    ++n;
    Record r;
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        r.kind = RecordKind::Kernel;
        takeGpuTiming(r, k);
        r.name = k->name ? k->name : "kernel";
        r.geometry = {k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ};
        r.geometry.registers_per_thread = k->registersPerThread;
        r.geometry.shared_memory_bytes = std::max(0, k->staticSharedMemory) + std::max(0, k->dynamicSharedMemory);
        r.geometry.cluster_x = int(k->clusterX);
        r.geometry.cluster_y = int(k->clusterY);
        r.geometry.cluster_z = int(k->clusterZ);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        r.kind = RecordKind::Memcpy;
        takeGpuTiming(r, m);
        r.bytes = m->bytes;
        r.name = memcpyKindName(m->copyKind);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        r.kind = RecordKind::Memset;
        takeGpuTiming(r, m);
        r.bytes = m->bytes;
        r.name = "Memset";
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(a);
        r.kind = RecordKind::Sync;
        r.start = s->start;
        r.end = s->end;
        r.stream = s->streamId;
        r.correlation = s->correlationId;
        r.name = syncName(s->type);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(a);
        if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
        r.kind = RecordKind::ExternalCorrelation;
        r.correlation = e->correlationId;
        r.external_id = e->externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(a);
        r.kind = RecordKind::Marker;
        r.start = r.end = m->timestamp;
        r.marker_id = m->id;
        r.marker_flags = uint32_t(m->flags);
        if (m->name) r.name = m->name;
        if (m->domain) r.domain = m->domain;
        break;
      }
      default:
        continue;  // API records only exist to carry external correlation records
    }
    out.push_back(std::move(r));
  }
  return n;
}

}  // namespace tandem::profiler
