#include "plan_trace/gpu/plan_observer.h"

#include <string>

#include "plan_trace/plan_rows.h"

namespace tandem::plan_trace {

std::vector<profiler::TaskInfo> taskInfos(const RankPlan& rp, int rank) {
  const std::vector<int64_t> live = arenaLiveBytes(rp);
  const std::vector<traces::PlanTaskRow> rows = planTaskRows(rank, rp);
  std::vector<profiler::TaskInfo> out;
  out.reserve(rp.tasks.size());
  for (size_t k = 0; k < rp.tasks.size(); ++k) {
    const Task& t = rp.tasks[k];
    profiler::TaskInfo i;
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

PlanObserver::PlanObserver(profiler::Profiler& profiler, const RankPlan& program, int rank)
    : profiler_(profiler), program_(program), rank_(rank) {
  profiler_.addTasks(taskInfos(program, rank));
  named_.assign(program.streams.size(), false);
}

void PlanObserver::onStepBegin(int step) { profiler_.stepBegin(step, rank_); }
void PlanObserver::onStepEnd(int step) { profiler_.stepEnd(step); }

void PlanObserver::onTaskBegin(const Task& task, cudaStream_t stream) {
  // Streams are named the first time a task shows which CUDA stream is which.
  if (task.stream >= 0 && size_t(task.stream) < named_.size() && !named_[size_t(task.stream)]) {
    const StreamInfo& si = program_.streams[size_t(task.stream)];
    profiler_.nameStream(task.stream, stream, si.kind, si.name, rank_);
    named_[size_t(task.stream)] = true;
  }
  profiler_.taskBegin(task.id, stream, rank_);
}

void PlanObserver::onTaskEnd(const Task& task, cudaStream_t) { profiler_.taskEnd(task.id, rank_); }
void PlanObserver::onCaptureBegin(cudaStream_t) { profiler_.captureBegin(); }
void PlanObserver::onCaptureEnd(cudaStream_t) { profiler_.captureEnd(); }
void PlanObserver::onSetupWorkBegin() { profiler_.setupWorkBegin(); }
void PlanObserver::onSetupWorkEnd() { profiler_.setupWorkEnd(); }

}  // namespace tandem::plan_trace
