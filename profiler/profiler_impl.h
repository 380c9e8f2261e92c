#pragma once
// Private state of Profiler, shared by profiler.cpp (public calls, host-side
// rows, clocks), cupti_session.cpp (CUPTI subscription, buffers, callbacks)
// and attribution.cpp (records -> trace rows).

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "profiler/profiler.h"
#include "profiler/records.h"
#include "traces/trace_writer.h"

namespace tandem::profiler {

// External id pushed for work the executor issues inside a step but outside
// any plan task (its own loss all-reduce, result copies). Never a task id.
inline constexpr int64_t kStepWork = -2;
inline constexpr uint64_t kStepWorkExternal = ~uint64_t(0) - 1;

// The plan stream of records whose CUDA stream the plan does not name.
inline constexpr int kUnknownStreamBase = 1000;
inline constexpr int kHostSyncStream = 999;
inline constexpr int kSetupStream = 998;

struct Clock {
  uint64_t cupti_ns = 0;
  int64_t realtime_ns = 0;
  int64_t monotonic_ns = 0;
};
Clock readClocks();

struct Profiler::Impl {
  explicit Impl(const ProfilerOptions& o);
  ~Impl();

  // cupti_session.cpp
  void start();        // subscribe, enable kinds, register callbacks
  void stop();         // flush, disable, unsubscribe
  uint8_t* takeBuffer();
  void giveBackBuffer(uint8_t* b);
  void bufferDone(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t valid);
  void onGraphNode(CUpti_CallbackId cbid, const CUpti_GraphData* g);
  void onLaunch(uint32_t correlation, int64_t task);

  // attribution.cpp: consume decoded records (under write_mu).
  void consume(std::vector<Record>& records, bool final);
  bool attribute(const Record& r, int64_t& task) const;
  void writeDeviceRecord(const Record& r, int64_t task);
  void ensureStream(int stream, traces::StreamKind kind, const std::string& name);
  void drainHostRows();
  void resolveNccl(bool final);
  std::vector<Record> nccl_waiting;  // NCCL kernels waiting for their step's window
  int64_t toRunNs(uint64_t cupti) const { return int64_t(cupti) + offset_ns; }

  ProfilerOptions opt;
  std::unique_ptr<traces::TraceWriter> writer;
  std::mutex write_mu;  // writer, ext map, pending, summary
  int64_t offset_ns = 0;  // run ns = CUPTI ns + offset_ns (CLOCK_REALTIME base)
  Clock start_clock;

  std::unordered_map<int64_t, TaskInfo> tasks;
  std::map<int, std::pair<traces::StreamKind, std::string>> plan_streams;
  std::unordered_map<uint32_t, int> cupti_stream_to_plan;  // learned
  std::unordered_map<cudaStream_t, int> cuda_stream_to_plan;
  std::set<int> streams_written;
  std::set<int64_t> arena_counter_written;  // tasks whose live-arena sample is stored

  std::mutex node_mu;
  std::unordered_map<uint64_t, int64_t> node_task;  // graph node id -> task (kStepWork allowed)
  std::unordered_map<uint32_t, int64_t> launch_task;  // launch correlation id -> task (callback)
  std::unordered_map<uint32_t, int64_t> ext_task;     // API correlation id -> task (external correlation records)
  int64_t ext_records = 0;

  struct Pending {
    Record record;
    int age = 0;  // batches seen without a correlation
  };
  std::vector<Pending> pending;
  std::map<uint32_t, Record> open_markers;

  // Host-side rows from the launching thread, drained by the CUPTI thread.
  std::mutex host_mu;
  std::vector<traces::RangeRow> host_ranges;
  std::vector<traces::StepRow> host_steps;
  std::vector<traces::CounterRow> host_counters;
  std::vector<traces::StatRow> extra_stats;
  // NCCL kernels by issue order (see resolveNccl): the collective tasks in the
  // order the executor issued them in one step, and the closed step windows.
  std::vector<int64_t> collective_order;
  int order_step = -1;
  std::vector<std::pair<uint64_t, uint64_t>> step_windows;  // CUPTI ns, begin..end
  // Clock measurements (CUPTI ns, begin..end; end 0 while open) and their results.
  std::vector<std::pair<uint64_t, uint64_t>> clock_sync_windows;
  bool inClockSync(uint64_t cupti);  // takes host_mu
  // The executor's set-up work (CUPTI ns, begin..end; end 0 while open).
  std::vector<std::pair<uint64_t, uint64_t>> setup_windows;
  bool inSetupWork(uint64_t cupti);  // takes host_mu
  bool have_offset[2] = {false, false};  // start, end
  ClockOffsetSample offsets[2];

  // Buffer pool.
  std::mutex pool_mu;
  std::vector<uint8_t*> free_buffers;
  std::vector<uint8_t*> all_buffers;

  CUpti_SubscriberHandle subscriber = nullptr;
  bool started = false;
  bool finished = false;
  bool in_task = false;
  bool in_step = false;
  uint64_t task_start_cupti = 0;
  uint64_t step_start_cupti = 0;
  int current_step = -1;
  std::set<std::string> unattributed_names;
  ProfileSummary summary;
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> grown{0};
  void* nvtx_domain = nullptr;
};

// The one active profiler (CUPTI callbacks are plain functions).
extern std::atomic<Profiler::Impl*> g_active;
// The task whose launches the current thread is issuing (graph node callback).
int64_t& currentTask();

}  // namespace tandem::profiler
