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

#include "profiler/power_sampler.h"
#include "profiler/profiler.h"
#include "profiler/records.h"
#include "traces/store/trace_writer.h"
#include "traces/trackers/track_ids.h"

namespace tandem::profiler {

// Work the executor issues inside a step but outside any plan task (its own
// loss all-reduce, result copies) is tagged kStepWork. The external id pushed
// for it is kStepExternalBase + step: it also names the step, so a record
// whose launch carried it (a graph replay's kernels, the step's copies)
// belongs to that step even when the next step is already queued. Never a
// task id.
inline constexpr int64_t kStepWork = -2;
inline constexpr uint64_t kStepExternalBase = uint64_t(1) << 62;

// Tracks outside the plan's streams come from the shared declarations
// (traces/trackers/track_ids.h): set-up work, host syncs, and CUDA streams
// no plan task named, numbered in the device-stream range.
inline constexpr int kHostSyncStream = traces::kHostSyncTrack;
inline constexpr int kSetupStream = traces::kSetupWorkTrack;

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
  void onLaunchStep(uint32_t correlation, int step);
  int stepOf(uint32_t correlation);  // the step whose launch this was, -1 if none (takes node_mu)

  // attribution.cpp: consume decoded records (under write_mu).
  void consume(std::vector<Record>& records, bool final);
  bool attribute(const Record& r, int64_t& task) const;
  void writeDeviceRecord(const Record& r, int64_t task);
  void ensureStream(int stream, StreamKind kind, const std::string& name);
  void drainHostRows(bool final);
  void resolveNccl(bool final);
  // Writes the rows of ended steps whose records have all arrived (three
  // flush periods after the host saw the end; every one when final).
  void writeSettledSteps(bool final);
  uint64_t settleNs() const;
  std::vector<Record> nccl_waiting;  // NCCL kernels waiting for their step's window
  int64_t toRunNs(uint64_t cupti) const { return int64_t(cupti) + offset_ns; }

  ProfilerOptions opt;
  std::unique_ptr<traces::TraceWriter> writer;
  std::mutex write_mu;  // writer, ext map, pending, summary
  int64_t offset_ns = 0;  // run ns = CUPTI ns + offset_ns (CLOCK_REALTIME base)
  Clock start_clock;

  std::unordered_map<int64_t, TaskInfo> tasks;
  std::map<int, std::pair<StreamKind, std::string>> plan_streams;
  std::unordered_map<uint32_t, int> cupti_stream_to_plan;  // learned
  traces::TrackNumbering unknown_stream_tracks{traces::kDeviceStreamTracks};  // CUDA streams no task named
  std::unordered_map<cudaStream_t, int> cuda_stream_to_plan;
  std::set<int> streams_written;
  std::set<int64_t> arena_counter_written;  // tasks whose live-arena sample is stored

  std::mutex node_mu;
  std::unordered_map<uint64_t, int64_t> node_task;  // graph node id -> task (kStepWork allowed)
  std::unordered_map<uint32_t, int64_t> launch_task;  // launch correlation id -> task (callback)
  std::unordered_map<uint32_t, int> launch_step;      // launch correlation id -> step (callback)
  // Ranks sharing the process: the rank whose thread issued step work (no
  // task names it), by graph node and by launch correlation.
  std::unordered_map<uint64_t, int> node_rank;
  std::unordered_map<uint32_t, int> launch_rank;
  int stepWorkRank(const Record& r);  // -1 when unknown (takes node_mu)
  std::unordered_map<uint32_t, int64_t> ext_task;     // API correlation id -> task (external correlation records)
  std::unordered_map<uint32_t, int> ext_step;         // API correlation id -> step (the step's own pushes)
  // First start and last end (CUPTI ns) of the GPU records per launch
  // correlation that can name a step: graph replays and the executor's step
  // work. Folded into step_gpu once the correlation's step is known.
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> corr_extent;
  std::map<int, std::pair<uint64_t, uint64_t>> step_gpu;  // step -> its GPU extent
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
  // Steps the host has begun and not ended (begin time, NVTX range), and the
  // ended ones whose rows wait for their records. With steps queued ahead
  // (CudaExecutor::run) step k + 1 begins before step k ends.
  struct EndedStep {
    int step = 0;
    uint64_t begin = 0, end = 0;  // CUPTI ns, host
  };
  struct OpenStep {
    uint64_t begin = 0;  // CUPTI ns, host
    uint64_t range = 0;  // NVTX range id
    int ranks_in = 0;    // ranks that began it and have not ended it
  };
  std::map<int, OpenStep> open_steps;
  std::vector<EndedStep> ended_steps;
  std::vector<traces::CounterRow> host_counters;
  std::vector<traces::StatRow> extra_stats;
  std::unique_ptr<PowerSampler> power;  // null when opt.power_sample_ms is 0
  // Turns the sampler's samples into counters and the summary's power figures.
  void addPowerSamples(std::vector<PowerSample> samples);
  // NCCL kernels by issue order (see resolveNccl): the collective tasks in the
  // order the executor issued them in one step, and the closed step windows.
  std::vector<int64_t> collective_order;
  int order_step = -1;
  struct StepWindow {
    int step = 0;
    uint64_t begin = 0, end = 0;  // CUPTI ns, host
  };
  std::vector<StepWindow> step_windows;  // in the order steps ended
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
  int current_step = -1;  // the step begun last

  // Several ranks in this process (ProfilerOptions::ranks > 1): the keys of
  // the maps above carry the rank (task ids in `tasks`, the external
  // correlation ids and the graph nodes' tasks; plan stream indices in
  // plan_streams, the stream maps and streams_written). With one rank a key
  // is the id itself and every row is opt.rank's.
  static constexpr int64_t kRankTaskStride = int64_t(1) << 40;
  static constexpr int kRankStreamStride = 1 << 20;  // above every track range but host threads
  bool manyRanks() const { return opt.ranks > 1; }
  int64_t taskKey(int rank, int64_t task) const { return manyRanks() ? rank * kRankTaskStride + task : task; }
  int streamKey(int rank, int stream) const { return manyRanks() ? rank * kRankStreamStride + stream : stream; }
  int rankOfStream(int key) const { return manyRanks() ? key / kRankStreamStride : opt.rank; }
  int streamOfKey(int key) const { return manyRanks() ? key % kRankStreamStride : key; }
  void checkRank(int rank) const;
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
// The step whose launches the current thread is issuing (launch callback), -1 outside steps.
int& currentStep();
// The rank whose step the current thread issues (ranks sharing the process), -1 before its first step.
int& currentRank();

}  // namespace tandem::profiler
