#pragma once
// PlanObserver: the bridge from the CUDA executor's TaskObserver to the
// Profiler. Header-only on purpose: tandem_profiler itself never sees engine
// types; only a program that has both the executor and the profiler (the CLI,
// the GPU tests, the overhead benchmark) includes this file.
//
//   profiler::Profiler prof(options);
//   profiler::PlanObserver obs(prof, plan.programs[0]);   // stores the plan's tasks
//   exec_options.observer = &obs;                          // before creating the executor

#include <string>
#include <vector>

#include "engine/cuda/task_observer.h"
#include "engine/plan.h"
#include "profiler/profiler.h"

namespace tandem::profiler {

inline traces::TracePhase tracePhaseOf(Phase p) {
  switch (p) {
    case Phase::Forward: return traces::TracePhase::Forward;
    case Phase::Backward: return traces::TracePhase::Backward;
    case Phase::Recompute: return traces::TracePhase::Recompute;
    case Phase::Optimizer: return traces::TracePhase::Optimizer;
    case Phase::Comm: return traces::TracePhase::Comm;
    case Phase::Data: return traces::TracePhase::Data;
  }
  return traces::TracePhase::None;
}

inline traces::StreamKind traceStreamKindOf(StreamKind k) {
  switch (k) {
    case StreamKind::Compute: return traces::StreamKind::Compute;
    case StreamKind::Comm: return traces::StreamKind::Comm;
    case StreamKind::Copy: return traces::StreamKind::Copy;
  }
  return traces::StreamKind::Compute;
}

// The rank program's tasks as the profiler stores them; dependencies are the
// previous task of the same stream and the recorders of waited events (the
// same rule as the simulator's trace output, so both runs carry equal graphs).
// Arena bytes live at each task index: every top-level buffer (views share
// their parent's bytes) from its first to its last use; persistent ones always.
inline std::vector<int64_t> arenaLiveBytes(const RankPlan& rp) {
  const size_t n = rp.tasks.size();
  std::vector<int64_t> delta(n + 1, 0);
  int64_t always = 0;
  for (const Buffer& b : rp.buffers) {
    if (b.parent >= 0 || b.offset < 0) continue;
    if (b.persistent) {
      always += b.bytes;
      continue;
    }
    if (b.first_use < 0 || b.last_use < b.first_use || size_t(b.last_use) >= n) continue;
    delta[size_t(b.first_use)] += b.bytes;
    delta[size_t(b.last_use) + 1] -= b.bytes;
  }
  std::vector<int64_t> live(n);
  int64_t sum = always;
  for (size_t i = 0; i < n; ++i) live[i] = sum += delta[i];
  return live;
}

inline std::vector<TaskInfo> taskInfos(const RankPlan& rp) {
  const std::vector<int64_t> live = arenaLiveBytes(rp);
  std::vector<int64_t> recorder(size_t(rp.num_events > 0 ? rp.num_events : 0), -1);
  for (const Task& t : rp.tasks)
    if (t.record_event >= 0 && t.record_event < rp.num_events) recorder[size_t(t.record_event)] = t.id;
  std::vector<int64_t> last_on_stream(rp.streams.size(), -1);
  std::vector<TaskInfo> out;
  out.reserve(rp.tasks.size());
  for (const Task& t : rp.tasks) {
    TaskInfo i;
    i.id = t.id;
    i.name = t.name;
    i.op = t.collective ? std::string(toString(t.collective->op)) : std::string(toString(t.op));
    i.phase = tracePhaseOf(t.phase);
    i.layer = t.layer;
    i.micro_batch = t.micro_batch;
    i.stream = t.stream;
    i.flops = t.flops;
    i.bytes = t.collective ? t.collective->bytes : t.bytes_read + t.bytes_written;
    i.arena_live_bytes = live[out.size()];
    if (t.stream >= 0 && size_t(t.stream) < last_on_stream.size()) {
      if (last_on_stream[size_t(t.stream)] >= 0) i.deps.push_back(last_on_stream[size_t(t.stream)]);
      last_on_stream[size_t(t.stream)] = t.id;
    }
    for (int e : t.wait_events)
      if (e >= 0 && size_t(e) < recorder.size() && recorder[size_t(e)] >= 0) i.deps.push_back(recorder[size_t(e)]);
    if (t.collective) {
      i.collective_op = std::string(toString(t.collective->op));
      i.group = t.collective->group;
      i.collective_bytes = t.collective->bytes;
    }
    out.push_back(std::move(i));
  }
  return out;
}

class PlanObserver : public cuda::TaskObserver {
 public:
  PlanObserver(Profiler& profiler, const RankPlan& program) : profiler_(profiler), program_(program) {
    profiler_.addTasks(taskInfos(program));
    named_.assign(program.streams.size(), false);
  }

  void onStepBegin(int step) override { profiler_.stepBegin(step); }
  void onStepEnd(int step) override { profiler_.stepEnd(step); }
  void onTaskBegin(const Task& task, cudaStream_t stream) override {
    // Streams are named the first time a task shows which CUDA stream is which.
    if (task.stream >= 0 && size_t(task.stream) < named_.size() && !named_[size_t(task.stream)]) {
      const StreamInfo& si = program_.streams[size_t(task.stream)];
      profiler_.nameStream(task.stream, stream, traceStreamKindOf(si.kind), si.name);
      named_[size_t(task.stream)] = true;
    }
    profiler_.taskBegin(task.id, stream);
  }
  void onTaskEnd(const Task& task, cudaStream_t) override { profiler_.taskEnd(task.id); }
  void onCaptureBegin(cudaStream_t) override { profiler_.captureBegin(); }
  void onCaptureEnd(cudaStream_t) override { profiler_.captureEnd(); }
  void onSetupWorkBegin() override { profiler_.setupWorkBegin(); }
  void onSetupWorkEnd() override { profiler_.setupWorkEnd(); }

 private:
  Profiler& profiler_;
  const RankPlan& program_;
  std::vector<bool> named_;
};

}  // namespace tandem::profiler
