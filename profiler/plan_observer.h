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
#include "traces/plan_rows.h"

namespace tandem::profiler {

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

// The rank program's tasks as the profiler stores them: the trace store's
// plan rows (traces/plan_rows.h, which the simulator's trace output writes
// too, so both runs carry the same graph) with the live arena bytes and the
// collectives' group and payload.
inline std::vector<TaskInfo> taskInfos(const RankPlan& rp) {
  const std::vector<int64_t> live = arenaLiveBytes(rp);
  const std::vector<traces::PlanTaskRow> rows = traces::planTaskRows(/*rank=*/0, rp);
  std::vector<TaskInfo> out;
  out.reserve(rp.tasks.size());
  for (size_t k = 0; k < rp.tasks.size(); ++k) {
    const Task& t = rp.tasks[k];
    TaskInfo i;
    static_cast<traces::PlanTaskRow&>(i) = rows[k];
    i.arena_live_bytes = live[k];
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
      profiler_.nameStream(task.stream, stream, traces::traceStreamKindOf(si.kind), si.name);
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
