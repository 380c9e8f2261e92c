#pragma once
// Merging per-rank trace files (one per process of a cluster run) into one
// run. Each input contributes its latest run; its timestamps are moved onto
// the common clock with the per-rank offsets stored in its clocks table
// (common = local + offset_ns). A rank present in two inputs is an error.

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::traces {

class TraceWriter;

struct MergeResult {
  int64_t run = -1;
  int inputs = 0;
  int ranks = 0;
  int64_t activities = 0;
};

MergeResult mergeTraces(const std::vector<std::string>& inputs, TraceWriter& writer);

}  // namespace tandem::traces
