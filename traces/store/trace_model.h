#pragma once
// The trace store's value types: contract 2 of tandem (docs/trace-schema.md).
//
// The profiler, the simulator and the importers fill these plain structs and
// hand them to TraceWriter; the reader and the analyses return them. They
// depend on nothing but the standard library so that the store stays free of
// the engine, Qt and CUDA. Every timestamp is an integer in nanoseconds on the
// run's clock (the profiler converts CUPTI time before writing; the merger
// applies per-rank offsets from ClockRow).

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "vocabulary/kinds.h"  // Phase, StreamKind: shared with the Plan

namespace tandem::traces {

// Every failure of the store (unreadable file, foreign schema, bad import
// input, unknown run) is a TraceError; its message is one line that names the
// file and what was expected.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A row the writer refuses for a time outside the trace's range: its
// message names the row, not a file, so that the one who made the row (an
// importer, merge) can say where it came from.
class TraceRowError : public TraceError {
 public:
  using TraceError::TraceError;
};

// Every time in a trace (ns, any clock) lies within +-2^62, about 146 years
// either way: durations and clock shifts of such times cannot overflow, and
// a time outside is a damaged or foreign input, refused when written.
constexpr int64_t kMaxTraceTimeNs = int64_t(1) << 62;
inline bool traceTimeInRange(int64_t t) { return t >= -kMaxTraceTimeNs && t <= kMaxTraceTimeNs; }
// The same test for a time still in floating point (an import's microseconds
// scaled, a clock shift), before it is converted to int64_t, where a value
// outside would be undefined: false for NaN too. (Not an overload: an int
// argument would then be ambiguous.)
inline bool floatTraceTimeInRange(long double t) { return t >= -kMaxTraceTimeNs && t <= kMaxTraceTimeNs; }

// The kinds shared with the Plan (vocabulary/kinds.h), named here too so
// that code working in the store's namespace spells them as before.
using tandem::Phase;
using tandem::StreamKind;
using tandem::parsePhase;
using tandem::parseStreamKind;

enum class RunKind { Real, Simulated, Imported };

// Stored as small integers (see the `activity_kinds` table in the file).
enum class ActivityKind : uint8_t { Kernel, Memcpy, Memset, Collective, Send, Recv, Sync, Host };

enum class Severity : uint8_t { Info, Warning, Error, DataLoss };

std::string_view toString(RunKind v);
std::string_view toString(ActivityKind v);
std::string_view toString(Severity v);
std::optional<RunKind> parseRunKind(std::string_view s);
std::optional<ActivityKind> parseActivityKind(std::string_view s);
std::optional<Severity> parseSeverity(std::string_view s);

// One run: a real profile, a simulation or an imported trace.
struct RunInfo {
  int64_t id = -1;  // filled by the store
  RunKind kind = RunKind::Real;
  std::string name;
  std::string job_yaml;       // the job as given (may be empty for imports)
  std::string job_hash;       // content hash of the job
  std::string topology;       // the topology's name (a preset's, or a file's name); "" when unknown
  std::string topology_yaml;  // the whole topology (docs/topology-format.md) the run was simulated on; "" for real runs
  std::string host;
  std::string devices_json;   // JSON array describing the devices, free form
  std::string tool_version;   // "tandem 0.1.0", or the import source's schema version
  int64_t created_unix_ns = 0;
  int world_size = 1;
  int plan_format = 0;        // the Plan format (docs/plan-format.md) of the plan facts stored; 0: none
};

// The track the profiler files the executor's GPU work before the first
// step on (timing cuBLASLt's algorithms): untagged, and not step work.
inline constexpr std::string_view kSetupStreamName = "executor set-up (GEMM algorithm timing)";

// A timeline track of one rank: a CUDA stream, a simulated stream or a host thread.
struct StreamRow {
  int rank = 0;
  int stream = 0;  // unique within the rank
  StreamKind kind = StreamKind::Compute;
  std::string name;
  int device = -1;
};

// Launch geometry of a kernel, when known, and what each of its blocks holds
// on an SM where the trace recorded it (CUPTI's kernel records; imports of
// Nsight Systems exports): registers and shared memory decide how many of
// its blocks an SM takes, and whether another kernel's blocks fit beside
// them. A Hopper GEMM's cluster places its blocks on SMs in groups.
struct LaunchGeometry {
  int grid_x = 0, grid_y = 0, grid_z = 0;
  int block_x = 0, block_y = 0, block_z = 0;
  int registers_per_thread = -1;    // -1: not recorded
  int shared_memory_bytes = -1;     // per block, static and dynamic; -1: not recorded
  int cluster_x = 0, cluster_y = 0, cluster_z = 0;  // 0: no cluster or not recorded
  bool hasResources() const { return registers_per_thread >= 0 && shared_memory_bytes >= 0; }
  bool operator==(const LaunchGeometry&) const = default;
};

// One interval of work on a stream. `name` is interned by the writer.
struct ActivityRow {
  int rank = 0;
  int device = -1;
  int stream = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;  // >= start_ns
  ActivityKind kind = ActivityKind::Kernel;
  std::string name;
  int64_t task_id = -1;         // plan task, the join key real <-> simulated; -1 if none
  Phase phase = Phase::None;
  int layer = -1;
  int micro_batch = -1;
  int64_t correlation_id = -1;  // links a kernel to its host launch record; -1 if none
  int64_t bytes = 0;            // bytes moved (memcpy, collective payload) or touched (kernel)
  double flops = 0;             // known from the plan; 0 if unknown
  std::optional<LaunchGeometry> geometry;
};

// NVTX-style annotation range on a rank's host timeline.
struct RangeRow {
  int rank = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string name;
  int depth = 0;
  std::string domain;  // NVTX domain or "" for the default domain
};

// A sampled value: "memory.in_use_bytes", "link.util.<link>".
struct CounterRow {
  int rank = 0;
  std::string name;
  int64_t ts_ns = 0;
  double value = 0;
};

// One training step on one rank.
struct StepRow {
  int rank = 0;
  int step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// A named per-run counter, as Perfetto's stats table: dropped records,
// import anomalies, anything a reader should know was not stored.
struct StatRow {
  std::string name;
  int64_t value = 0;
  Severity severity = Severity::Info;
  std::string description;
};

// A task of the plan, copied into the trace so that analyses can walk the
// dependency graph without the engine.
struct PlanTaskRow {
  int rank = 0;
  int64_t task_id = 0;
  std::string name;
  std::string op;  // the engine's op spelling ("matmul", "all_reduce", ...)
  Phase phase = Phase::None;
  int layer = -1;
  int micro_batch = -1;
  int stream = 0;
  double flops = 0;
  int64_t bytes = 0;
  std::vector<int64_t> deps;  // task ids this task waits for (events and stream order)
};

// The facts of the plan a run came from (docs/trace-schema.md, "Plan
// facts"), written with the run where the plan is known, so that whoever
// explains the run reads them instead of planning its job again. Filled by
// the plan-trace bridge (plan_trace/plan_facts.h); the store knows no plan.
struct RecomputeRow {
  int layer = 0;
  std::string policy;        // "none", "selective", "full"
  int64_t bytes_kept = 0;    // the layer's activations kept from forward to backward, per micro-batch
  int64_t bytes_saved = 0;   // versus recomputing nothing
  double extra_flops = 0;    // recompute work per step
  int64_t extra_ns = -1;     // time recomputing the layer per step on rank 0, where the run timed it (simulated); -1 otherwise
};

// The memory plan of one rank program (ranks that run the same program share it).
struct MemoryRow {
  int program = 0;
  int first_rank = 0;
  int rank_count = 1;
  int64_t arena_bytes = 0;            // the one allocation the executor makes
  int64_t peak_bytes = 0;
  int64_t lower_bound_bytes = 0;      // most bytes live at once, however placed
  int64_t activation_peak_bytes = 0;
  int64_t gpu_run_bytes = 0;          // free device memory `tandem run` requires per rank (arena, executor buffers, reserve)
  std::vector<std::pair<std::string, int64_t>> by_category;  // live bytes per tensor category at the peak
};

struct PlanFacts {
  std::vector<RecomputeRow> recompute;  // by layer
  std::vector<MemoryRow> memory;        // by program
  // The whole plan, as the bridge encoded it (`encoding`, e.g.
  // "json+zlib"); empty when not stored.
  std::string plan_encoding;
  std::string plan_blob;
  bool empty() const { return recompute.empty() && memory.empty() && plan_blob.empty(); }
};

// A collective as one record per rank: issued at start_ns, done at end_ns.
struct CollectiveRow {
  int rank = 0;
  int64_t task_id = -1;
  std::string op;     // "all_reduce", "reduce_scatter", ...
  std::string group;  // process group name
  int64_t bytes = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Clock anchors of a rank: simultaneous readings of the clocks involved, and
// the offset that maps this rank's timestamps onto the run's common clock
// (common = local + offset_ns). The merger applies offset_ns.
struct ClockRow {
  int rank = 0;
  std::string source;  // "cupti", "nsys", "kineto", "sim"
  int64_t cupti_ns = 0;
  int64_t realtime_ns = 0;
  int64_t monotonic_ns = 0;
  int64_t offset_ns = 0;
};

}  // namespace tandem::traces
