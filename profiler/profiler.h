#pragma once
// The profiler: CUPTI activity + NVTX ranges of one process (one rank) into
// that rank's own trace file, every GPU record tagged with the plan task it
// belongs to (docs/profiler.md).
//
//   tandem::profiler::ProfilerOptions o;  o.path = "run.rank0.sqlite"; ...
//   tandem::profiler::Profiler p(o);       // subscribes to CUPTI, enables activity kinds
//   p.addTasks(tasks); p.nameStream(0, stream, ...);
//   p.stepBegin(0); p.taskBegin(id, stream); ...launches...; p.taskEnd(id); p.stepEnd(0);
//   ProfileSummary s = p.finish();         // forced flush, stats, closes the file
//
// The profiler knows nothing of the engine: tasks arrive as TaskInfo (see
// plan_trace/gpu/plan_observer.h for the adapter from the executor's TaskObserver).
// CUPTI is one per process, so at most one Profiler exists at a time.
// Eager launches are attributed through CUPTI external correlation ids (the
// task id is pushed around each task's launches); CUDA Graph replays through
// the graph node ids recorded while the graph was captured.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::profiler {

// Every failure to start or run the profiler (CUPTI held by another tool,
// unsupported driver, unwritable trace file).
class ProfilerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One plan task as the profiler needs it: the row the trace store keeps for
// it (task id, name, op, phase, plan stream index, dependencies, ...; its
// rank is the profiler's) and what the profiler adds when the task runs.
struct TaskInfo : traces::PlanTaskRow {
  // Collectives only: operation, group and payload bytes per rank.
  std::string collective_op;
  std::string group;
  int64_t collective_bytes = 0;
  // Bytes of the plan's arena live while this task runs (memory plan), or -1.
  int64_t arena_live_bytes = -1;
};

struct ProfilerOptions {
  std::string path;            // this rank's trace file (appended to if it exists)
  traces::RunInfo run;         // kind is forced to Real
  traces::PlanFacts plan_facts;  // of the plan the run executes (plan_trace/plan_facts.h), stored with the run
  int rank = 0;
  int device = 0;              // CUDA device of this rank (memory sampling)
  int64_t buffer_bytes = 8 << 20;  // size of one CUPTI activity buffer
  int buffers = 8;                 // buffers allocated up front
  uint32_t flush_period_ms = 500;  // CUPTI's periodic flush; rows are committed after each buffer
  bool trace_all_api = false;  // record every runtime/driver call, not only launches (for debugging)
  bool nvtx_ranges = true;     // emit NVTX ranges (step, task) and stream names for other tools too
  int64_t arena_bytes = 0;     // the plan's arena (a counter at each step)
  int64_t arena_peak_bytes = 0;
  // GPU power, SM clock and clock-limit reasons through NVML every this many
  // ms (profiler/power_sampler.h); 0: none.
  int power_sample_ms = 10;
  // Ranks of the plan that share this process and its GPU (`tandem run
  // --ranks-per-gpu`), 0 .. ranks - 1; `rank` is then not used. Each rank's
  // tasks (TaskInfo::rank) and streams are kept apart, its records stored
  // under its own rank; every rank's thread begins and ends each step.
  int ranks = 1;
};

// A rank's clock against rank 0's, measured by the caller (`tandem run` uses
// NcclComm::measureClockOffsets with nowNs() as the clock).
struct ClockOffsetSample {
  int64_t local_ns = 0;   // this rank's run clock at the measurement
  int64_t offset_ns = 0;  // add to this rank's time to get rank 0's
  int64_t rtt_ns = 0;     // round trip of the measurement: right within rtt/2
};

// What finish() found, for the caller to print.
struct ProfileSummary {
  int64_t records = 0;         // CUPTI records read
  int64_t kernels = 0;         // compute kernels (not NCCL)
  int64_t kernels_attributed = 0;
  int64_t nccl_kernels = 0;
  int64_t nccl_attributed = 0;
  int64_t nccl_on_comm_stream = 0;
  int64_t memcpys = 0;         // memcpy + memset
  int64_t memcpys_attributed = 0;
  int64_t graph_kernels = 0;   // kernels run by graph replays
  // Kernels the executor issued inside a step but outside every plan task
  // (its loss all-reduce): not counted as attributed, not listed as unknown.
  int64_t step_work_kernels = 0;
  int64_t nccl_step_work = 0;  // of which NCCL
  int64_t clock_sync_records = 0;  // GPU records of the clock measurement (not plan work)
  int64_t setup_records = 0;       // GPU records of the executor's set-up work (GEMM algorithm timing)
  int64_t dropped_records = 0;
  int64_t buffers_grown = 0;   // buffers allocated beyond the pool
  int64_t ranges = 0;
  int64_t steps = 0;
  std::vector<std::string> unattributed;  // distinct names of unattributed kernels (at most 20)
  std::string path;
  // NVML samples (profiler/power_sampler.h): how many, and over the span
  // from the first step's start to the last step's end the median power,
  // the median SM clock and the share of samples held by the software
  // power cap (-1 where not reported); power_note says why there are none.
  // energy_per_step_j: from the energy counter over the same span, divided
  // by the steps ended (-1 where not reported); energy_power_w: that
  // energy over the span's time.
  int64_t power_samples = 0;
  bool power_instant = false;  // power is NVML's instantaneous reading (else its one-second average)
  double power_w_median = -1, sm_clock_mhz_median = -1, power_capped_share = -1;
  double energy_per_step_j = -1, energy_power_w = -1;
  std::string power_note;
};

class Profiler {
 public:
  explicit Profiler(const ProfilerOptions& options);  // throws ProfilerError
  ~Profiler();                                         // finishes if needed; never throws
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // The plan's tasks and streams (stored in the trace; used to tag records).
  // With several ranks in the process (ProfilerOptions::ranks) a task is of
  // rank TaskInfo::rank and a stream of `rank`; otherwise both are the
  // profiler's rank (ProfilerOptions::rank) and `rank` is not used.
  void addTasks(const std::vector<TaskInfo>& tasks);
  void nameStream(int plan_stream, cudaStream_t stream, StreamKind kind, const std::string& name, int rank = 0);

  // With several ranks, every rank's thread calls both for each step, and
  // stepBegin names the rank (`rank` as in addTasks): the step ends when
  // the last rank ended it.
  void stepBegin(int step, int rank = 0);
  void stepEnd(int step);  // after the step's GPU work completed: samples device memory
  // Around the launches of one task, on the launching thread (`rank` as in addTasks).
  void taskBegin(int64_t task_id, cudaStream_t stream, int rank = 0);
  void taskEnd(int64_t task_id, int rank = 0);
  void captureBegin();
  void captureEnd();

  // The run clock now (every row's clock): cuptiGetTimestamp() moved by the
  // start anchor's offset onto CLOCK_REALTIME.
  int64_t nowNs() const;
  // Around a measurement of this rank's clock against rank 0's, outside steps
  // and graph capture: GPU work in between (the ping-pong's NCCL kernels) is
  // stored untagged on its own track and counted apart, never as unattributed.
  void clockSyncBegin();
  // Stores the result as a clocks row, source "rank0-start" (or "rank0-end"
  // with at_end); finish() adds the clock.offset_* stats and the drift.
  void clockSyncEnd(const ClockOffsetSample& sample, bool at_end);
  // Around the executor's GPU work before the first step (timing GEMM
  // algorithms): stored untagged on its own track, counted apart.
  void setupWorkBegin();
  void setupWorkEnd();

  // A stat of the run (throughput, MFU, ...), written at finish().
  void setStat(const traces::StatRow& stat);

  // Forces CUPTI to hand over every record, writes stats and the end clock
  // anchor, detaches from CUPTI and closes the file. Idempotent.
  ProfileSummary finish();

  // The trace file's path.
  const std::string& path() const;

  // Private state; public only so that CUPTI's plain-function callbacks can reach it.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The human-readable attribution line ("kernels attributed: 100.0% (n/n) ...").
std::string formatSummary(const ProfileSummary& s);

}  // namespace tandem::profiler
