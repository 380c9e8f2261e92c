#pragma once
// PlanObserver: the bridge from the CUDA executor's TaskObserver to the
// Profiler. The profiler never sees engine types and the executor never sees
// the profiler; a program that has both (the rank runner, the GPU tests, the
// overhead benchmark) joins them with this class.
//
//   profiler::Profiler prof(options);
//   plan_trace::PlanObserver obs(prof, plan.programs[0]);  // stores the plan's tasks
//   exec_options.observer = &obs;                           // before creating the executor
//
// Ranks sharing one process (ProfilerOptions::ranks) share the profiler,
// an observer each that names its rank.

#include <vector>

#include "engine/cuda/task_observer.h"
#include "engine/plan/plan.h"
#include "profiler/profiler.h"

namespace tandem::plan_trace {

// The rank program's tasks as the profiler stores them: the trace store's
// plan rows (plan_trace/plan_rows.h, which the simulator's trace output
// writes too, so both runs carry the same graph) with the live arena bytes
// and the collectives' group and payload.
std::vector<profiler::TaskInfo> taskInfos(const RankPlan& rp, int rank = 0);

class PlanObserver : public cuda::TaskObserver {
 public:
  PlanObserver(profiler::Profiler& profiler, const RankPlan& program, int rank = 0);

  void onStepBegin(int step) override;
  void onStepEnd(int step) override;
  void onTaskBegin(const Task& task, cudaStream_t stream) override;
  void onTaskEnd(const Task& task, cudaStream_t) override;
  void onCaptureBegin(cudaStream_t) override;
  void onCaptureEnd(cudaStream_t) override;
  void onSetupWorkBegin() override;
  void onSetupWorkEnd() override;

 private:
  profiler::Profiler& profiler_;
  const RankPlan& program_;
  int rank_;
  std::vector<bool> named_;
};

}  // namespace tandem::plan_trace
