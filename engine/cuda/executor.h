#pragma once
// The CUDA executor: runs one rank's program of a Plan on one GPU. Each plan
// stream is a cudaStream, each plan event a cudaEvent, collectives are NCCL
// calls on the comm stream, and every buffer lives at its planned offset in
// one arena of memory.arena_bytes. By default the whole step (data copies,
// forward, backward, collectives, optimizer) is captured once as a CUDA Graph
// and replayed; `use_graph = false` issues the same calls eagerly.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/consistency.h"
#include "engine/cuda/check.h"
#include "engine/cuda/fusion.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/local_comm.h"
#include "engine/cuda/nccl_comm.h"
#include "engine/cuda/task_observer.h"
#include "engine/plan/plan.h"

namespace tandem::cuda {

// Thrown before any allocation when the plan does not fit the free memory.
class OutOfDeviceMemory : public CudaError {
 public:
  OutOfDeviceMemory(const std::string& what, int64_t needed, int64_t free_bytes)
      : CudaError(what), needed_bytes(needed), free_bytes(free_bytes) {}
  int64_t needed_bytes;
  int64_t free_bytes;
};

struct ExecutorOptions {
  int rank = 0;
  int world = 1;
  int device = 0;
  bool use_graph = true;
  NcclId nccl_id{};       // needed when world > 1 (one rank with collectives makes its own)
  // Several ranks of the plan on this GPU in this process, each executor on
  // a thread of its own (`tandem run --ranks-per-gpu`, local_comm.h): their
  // collectives go through these in-process communicators instead of NCCL.
  // With use_graph every rank's step is one graph the ranks capture
  // together (local_comm.h). Null: NCCL.
  std::shared_ptr<LocalWorld> local_world;
  double timeout_s = 60;  // longest wait for a step or a collective before aborting
  bool time_tasks = false;  // eager steps time every task with events (see taskMilliseconds)
  TaskObserver* observer = nullptr;  // told about steps, tasks and graph capture (the profiler); not owned
  // Fusions allowed (engine/cuda/fusion.h: kPlanFusions, kAllFusions, 0 for
  // none); TANDEM_FUSION in the environment overrides it. The plan's
  // fusions (GELU epilogues, add+layernorm) run where the plan decided them (engine/passes/fusion.h),
  // so the simulator and the calibration see the same work; 0 runs every
  // planned task on its own (a run that differs from its plan). The bias
  // gradient in the weight GEMM (kAllFusions) is the executor's own choice
  // inside one task, off by default (not faster on H200).
  unsigned fusion = kPlanFusions;
  // Time cuBLASLt's candidate algorithms for every GEMM shape of the plan
  // before the first step and keep the fastest (Gemm::setTuning); results
  // stay bit-identical between executors of one process, but another
  // process may choose differently. TANDEM_GEMM_TUNING=0 in the environment
  // turns it off (cuBLASLt's first choice, reproducible across processes).
  bool tune_gemms = true;
};

struct GpuStepResult {
  int step = 0;
  double loss = 0;       // mean over the global batch (all ranks)
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double ms = 0;         // GPU time of the step
};

struct GpuMemoryReport {
  int64_t planned_arena_bytes = 0;  // the plan's peak (one arena)
  int64_t workspace_bytes = 0;      // cuBLASLt workspace
  int64_t scratch_bytes = 0;        // kernel scratch, data staging, optimizer tables
  int64_t allocated_bytes = 0;      // everything this executor allocated
  int64_t device_used_bytes = 0;    // device memory in use after setup (context, NCCL too)
};

// Wall seconds of the constructor's set-up, by part (a 7B model's takes a
// minute or more before its first step).
struct SetupTimes {
  double total_s = 0;
  double kernels_and_arena_s = 0;  // kernel attributes, the arena allocated and zeroed
  double tables_s = 0;             // the tasks' tables and buffers (prepareTasks)
  double gemm_timing_s = 0;        // cuBLASLt algorithms timed (0 with tuning off)
  double initial_weights_s = 0;    // drawn on the device (or on the host and copied in: TANDEM_HOST_INIT=1)
};

class CudaExecutor {
 public:
  CudaExecutor(const Plan& plan, const ExecutorOptions& options);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // One full training step. The first call with use_graph captures the graph.
  // The host waits for the step to end, so the GPU idles between two calls.
  GpuStepResult step();
  // `steps` training steps, the same work as calling step() that often, but
  // in graph mode without an observer the next step is queued on the GPU
  // before the host waits for the current one (no idle GPU between steps,
  // host skew between ranks hidden). Calls on_step after each step ends.
  std::vector<GpuStepResult> run(int steps, const std::function<void(const GpuStepResult&)>& on_step = {});
  // Forward and backward (and collectives) of the next step without the
  // optimizer, always eager: for gradient checks against the CPU reference.
  GpuStepResult computeGradients();
  // With the optimizer sharded, a step starts by gathering the parameters
  // the previous step updated (engine/passes/buckets.h); this runs those
  // all-gathers now (collective: every rank calls it), so that every rank
  // holds every parameter after the last step. Nothing to do otherwise.
  void gatherParameters();
  // With schedule.optimizer_beside_forward a step's AdamW runs at the start
  // of the next step (engine/passes/buckets.h); this applies the last step's
  // now, so that the parameters are those after every step run (run() ends
  // with it). Nothing to do otherwise, or when already applied.
  void finishOptimizer();
  // For measurements of one kind of work (bench_energy_by_op): issues the
  // tasks `select` picks, `reps` times over in plan order, each on its
  // stream without the plan's events (as GEMM tuning issues them), and waits
  // for them. They compute on whatever the last step left (outputs are
  // overwritten, parameters updated again): the executor's state is no
  // longer a training run's. Tasks that index with a batch's tokens or
  // targets need that batch's LoadBatch picked too (the arena reuses its
  // buffers later in a step). Never collectives.
  void replayTasks(const std::function<bool(const Task&)>& select, int reps);

  std::vector<float> readBuffer(int buffer) const;
  void writeBuffer(int buffer, const std::vector<float>& values);

  // Checkpoints (engine/checkpoint/checkpoint.h): this rank's persistent
  // buffers copied to the host once the GPU is idle, with the step count,
  // as this rank's entry of a Snapshot of the plan's world (the other
  // ranks' entries empty: their processes hold them); and the state put
  // back from this rank's entry. Not between the steps of one run() call.
  // `reuse`: an earlier snapshot of this executor, written and done with,
  // whose host memory takes the copy (page-locked on its first use, so
  // that later copies run at the bus's speed instead of through the
  // driver's staging buffers into fresh pages).
  checkpoint::Snapshot snapshot(std::optional<checkpoint::Snapshot> reuse = std::nullopt) const;
  void restore(const checkpoint::Snapshot& snap);

  GpuMemoryReport memory() const;
  SetupTimes setupTimes() const;
  // With time_tasks: GPU milliseconds of each task, summed over the eager
  // steps run so far (index = task index of the rank's program).
  std::vector<double> taskMilliseconds() const;
  int stepsDone() const;
  // Which tasks the epilogue fusion merged into a GEMM (fused tasks issue no
  // kernel of their own; their work is in the GEMM of the task that launches it).
  const FusionPlan& fusion() const;
  // Whether task `index` of the rank's program issues GPU work of its own:
  // false for a task fused into a GEMM's epilogue and for a cross-entropy
  // backward the forward kernel already did.
  bool issuesWork(int index) const;
  // The GEMM shapes this executor timed (empty when tuning is off, or when
  // another executor of the process had already tuned them).
  const std::vector<GemmTuning>& gemmTuning() const;
  // cuBLASLt memsets in the step's graph, how many of them moved to the
  // graph's start, and into how many memsets of whole workspace-slice regions
  // the moved ones that write zeros were merged (graph_memsets.h;
  // TANDEM_GRAPH_HOIST_MEMSETS=0 keeps them in place). All 0 before the graph
  // is captured or without a graph.
  struct GraphMemsets {
    int memsets = 0, hoisted = 0, merged_into = 0;
    // The graph roots the merged memsets precede (0: they precede each GEMM
    // that had a memset instead; TANDEM_GRAPH_MERGED_MEMSET=users).
    int before_roots = 0;
    // The graph's edges as instantiated: full dependencies and the others
    // (programmatic, launch completion), a few of those named.
    int full_edges = 0, other_edges = 0;
    std::vector<std::string> other_edge_examples;
  };
  GraphMemsets graphMemsets() const;
  // The NCCL communicator over every rank (nullptr with one rank, or with
  // ranks in one process): for work outside the steps, such as measuring
  // clock offsets between ranks.
  NcclComm* communicator() const;
  const Plan& plan() const;

  // The replica check (engine/checkpoint/consistency.h) on the GPU: each
  // replicated parameter buffer's fingerprint taken on the device
  // (replicaHash), gathered over the rank's data-parallel group and
  // compared with the group's first member's; the first buffer that differs
  // on any member, named. Every rank of the group calls it after the same
  // step (it is a collective). Nothing to compare (no data-parallel group,
  // or the parameters sharded): std::nullopt at no cost.
  std::optional<checkpoint::ReplicaMismatch> checkReplicas();
  // Tests of the replica check: flips one bit of this rank's buffer.
  void flipBit(int buffer, int64_t bit);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cuda
