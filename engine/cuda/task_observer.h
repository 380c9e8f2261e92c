#pragma once
// TaskObserver: what the CUDA executor tells an observer (the profiler) around
// every plan task it issues, so that GPU activity can be tagged with the plan
// task it belongs to without the executor knowing about CUPTI or NVTX.
//
// The executor calls, on its host thread and in this order:
//   [onSetupWorkBegin() ... onSetupWorkEnd()   in the constructor, around GPU
//                                              work that is not a step: the
//                                              kernels' set-up (a probe kernel)
//                                              and the arena zeroed, the tasks'
//                                              tables, timing GEMM algorithms,
//                                              the initial weights copied in;
//                                              never nested]
//   onStepBegin(step)
//     [onCaptureBegin(stream)            first step of graph mode only]
//       onTaskBegin(task, stream) ... launches of the task ... onTaskEnd(task, stream)
//       (once per task issued, in program order)
//     [onCaptureEnd(stream)]
//   onStepEnd(step)                      after the step's GPU work finished
// With CudaExecutor::run (graph replays) the next step is launched before
// this one ends: onStepBegin(k + 1) comes between onStepBegin(k) and
// onStepEnd(k). Steps still end in order.
// In graph mode the tasks are issued once, inside the capture; later steps
// only replay the graph, so they see onStepBegin/onStepEnd alone. An observer
// that needs per-replay attribution must remember, at capture time, which
// graph nodes each task created (the profiler does, see docs/profiler.md).
//
// Every call happens between launches, never inside a kernel, and must not
// throw: the executor issues work around it. Implementations keep the calls
// cheap: they run once per task launch.

#include <cuda_runtime.h>

namespace tandem {
struct Task;
}

namespace tandem::cuda {

class TaskObserver {
 public:
  virtual ~TaskObserver() = default;

  virtual void onStepBegin(int step) = 0;
  virtual void onStepEnd(int step) = 0;
  virtual void onTaskBegin(const Task& task, cudaStream_t stream) = 0;
  virtual void onTaskEnd(const Task& task, cudaStream_t stream) = 0;
  virtual void onCaptureBegin(cudaStream_t stream) = 0;
  virtual void onCaptureEnd(cudaStream_t stream) = 0;
  virtual void onSetupWorkBegin() {}
  virtual void onSetupWorkEnd() {}
};

}  // namespace tandem::cuda
