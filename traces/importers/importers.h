#pragma once
// Importers: traces of other tools into a new run of a tandem trace file.
//
// - PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped (.json.gz): GPU kernels, memcpy and
//   memset, CUDA runtime calls (launch records), CPU ops as host activity,
//   user annotations as ranges; NCCL kernels become collectives.
// - Nsight Systems SQLite export (`nsys export --type sqlite`): kernels,
//   memcpy, memset, synchronisation, CUDA runtime calls, NVTX ranges and GPU
//   info, names through StringIds, one rank per CUDA device.
//
// Structural problems (not the format, a required field missing or of the
// wrong type, nothing importable) throw TraceError with the file and the
// place. Records the importer does not understand are counted in the run's
// stats (import.<format>.*), never silently dropped.

#include <cstdint>
#include <string>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::traces {

class TraceWriter;

enum class ImportFormat { Auto, Kineto, Nsys };

struct ImportResult {
  int64_t run = -1;
  std::string format;  // "kineto" or "nsys"
  int64_t activities = 0;
  int64_t ranges = 0;
  int64_t steps = 0;  // step rows (PyTorch: one per ProfilerStep#N)
  int ranks = 0;
  std::vector<StatRow> stats;
};

// Detects the format from the file's first bytes.
ImportFormat detectImportFormat(const std::string& path);

ImportResult importTrace(const std::string& path, TraceWriter& writer, ImportFormat format = ImportFormat::Auto,
                         const std::string& run_name = "");
ImportResult importKineto(const std::string& path, TraceWriter& writer, const std::string& run_name);
// A folder of per-rank PyTorch profiler files (*.json, *.json.gz; one per
// rank, the rank from each file's distributedInfo) as one multi-rank run:
// each imported on its own, then merged onto one clock, each rank's times
// moved by its file's baseTimeNanoseconds (traces/store/merge.h). Throws
// TraceError naming the folder when it holds no such file, or the file
// whose import or rank fails.
ImportResult importKinetoFolder(const std::string& dir, TraceWriter& writer, const std::string& run_name);
ImportResult importNsys(const std::string& path, TraceWriter& writer, const std::string& run_name);

}  // namespace tandem::traces
