#pragma once
// CUPTI activity records decoded into plain values (CUDA 13.0 record layouts:
// CUpti_ActivityKernel10, Memcpy6, Memset4, Synchronization2,
// ExternalCorrelation, Marker2). Decoding copies what the trace needs, so the
// buffer can go back to the pool at once.

#include <cstdint>
#include <string>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::profiler {

enum class RecordKind : uint8_t { Kernel, Memcpy, Memset, Sync, ExternalCorrelation, Marker, Other };

struct Record {
  RecordKind kind = RecordKind::Other;
  uint64_t start = 0;  // CUPTI ns
  uint64_t end = 0;
  uint32_t device = 0;
  uint32_t stream = 0;  // CUPTI stream id
  uint32_t correlation = 0;
  uint64_t graph_node = 0;  // 0: not launched by a graph
  uint64_t bytes = 0;
  uint64_t external_id = 0;  // ExternalCorrelation: the task id pushed
  uint32_t marker_id = 0;
  uint32_t marker_flags = 0;  // CUPTI_ACTIVITY_FLAG_MARKER_*
  std::string name;           // kernel name, memcpy kind, marker name
  std::string domain;         // marker domain
  traces::LaunchGeometry geometry;
};

// Decodes every record of one completed CUPTI buffer and appends them to out.
// Returns the number of records read (including kinds not kept).
int64_t decodeBuffer(uint8_t* buffer, size_t valid_bytes, std::vector<Record>& out);

// True for NCCL's device kernels ("ncclDevKernel_...", "ncclKernel_...").
bool isNcclKernel(const std::string& name);

}  // namespace tandem::profiler
