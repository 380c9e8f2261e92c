#pragma once
// Private state of CudaExecutor, shared by executor.cpp (setup, step loop,
// graph capture) and executor_tasks.cpp (one plan task -> kernel launches).

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/executor.h"
#include "engine/cuda/fusion.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/nccl_comm.h"
#include "engine/numerics/data.h"

namespace tandem::cuda {

struct CudaExecutor::Impl {
  // Host staging of one LoadBatch task, in pinned memory so the copies can be
  // graph nodes: tokens[n] targets[n], then the token-sorted index the
  // embedding backward uses, copied to device_index: order[N] seg_start[N+1]
  // seg_count[1], and with ranks > 1 every rank's tokens[N] (N = ranks * n:
  // a gathered embedding backward reads this load's tokens,
  // engine/passes/embedding_gather.h).
  struct LoadSlot {
    int task = -1;
    int64_t count = 0;
    int ranks = 1;
    int32_t* host = nullptr;
    int32_t* device_index = nullptr;
    int64_t indexWords() const { return 2 * ranks * count + 2 + (ranks > 1 ? ranks * count : 0); }
  };
  // Device table of a multi-tensor launch (GradNorm or AdamW task).
  struct Table {
    TensorSlot* slots = nullptr;
    int num_slots = 0;
    int64_t chunks = 0;
    float* partials = nullptr;
  };

  Impl(const Plan& plan, const ExecutorOptions& options);
  ~Impl();

  void* deviceAlloc(int64_t bytes);
  void* ptr(int buffer) const;
  void prepareTasks();
  bool fusionSupported(int task, int partner, FusionKind kind);
  void buildTable(int task);
  void initialiseParameters();
  void initialiseParametersOnDevice();
  void tuneGemms();
  void fillHostData(int step);
  void enqueueStep(bool with_optimizer);
  void enqueueTask(int index);
  // enqueueTask's launches (executor_tasks.cpp): issueTask by the task's
  // kind, and the kinds that take more than a launch or two.
  void issueTask(int index, cudaStream_t s);
  void issueLoadBatch(int index, cudaStream_t s);
  void issueEmbeddingBackward(int index, cudaStream_t s);
  void issueFusable(int index, cudaStream_t s);
  // training.precision fp8: a CastFp8 task, and a GEMM whose operands are
  // FP8 copies (their K-major copies made on the way).
  void issueCastFp8(int index, cudaStream_t s);
  Gemm::Fp8Operand kMajor(const Task& t, int slot, int64_t rows, int64_t cols, uint8_t* at, cudaStream_t s) const;
  void issueFp8Gemm(int index, cudaStream_t s);
  Gemm::Fp8Operand fp8Operand(int buffer) const;
  void prepareFp8();
  void issueAttention(int index, cudaStream_t s);
  void issueCollective(int index, cudaStream_t s);
  bool issueVocabularyParallel(int index, cudaStream_t s);
  void issuePointToPoint(int index, cudaStream_t s);
  TokenIndex tokenIndexOf(int index) const;
  void issueOptimizer(int index, cudaStream_t s);
  void waitForEvent(cudaEvent_t event, const char* what);
  void gatherParameters();
  void finishOptimizer();
  void replayTasks(const std::function<bool(const Task&)>& select, int reps);
  // The scalars' prev_* from pending_update.
  void setPreviousUpdate(StepScalars& in) const;
  // One step in two halves, so that the next step can be queued on the GPU
  // before this one ends (runAhead): launchStep stages the batch when it is
  // not staged yet, writes the step's scalars into `slot` and issues the step
  // (capturing the graph the first time); finishStep waits for it and reads
  // its loss from `slot`.
  void launchStep(int step, int slot, bool with_optimizer);
  // launchStep's graph step for ranks sharing one GPU (ExecutorOptions::local_world).
  void launchSharedStep(int slot);
  GpuStepResult finishStep(int step, int slot, bool with_optimizer);
  // Stages step + 1's batch as soon as the GPU has copied this one.
  void stageNextBatch(int step);
  bool canStageAhead(bool with_optimizer) const;
  bool canRunAhead() const;
  GpuStepResult runStep(bool with_optimizer);
  void runAhead(int steps, const std::function<void(const GpuStepResult&)>& on_step);
  std::vector<float> readBuffer(int buffer) const;
  void writeBuffer(int buffer, const std::vector<float>& values);

  Plan plan;
  const RankPlan* program = nullptr;
  ExecutorOptions opt;
  std::unique_ptr<TokenSource> data;
  // Over every rank (the loss; the data-parallel group when it is the
  // world), and one per other process group the rank is in, by name.
  std::unique_ptr<Communicator> comm;
  NcclComm* nccl_world = nullptr;  // comm, when it is NCCL's
  std::map<std::string, std::unique_ptr<Communicator>> group_comms;
  // NCCL, pipeline pairs: a communicator per direction of each pair group
  // (index: the sending place), so that each carries the sends of one rank
  // and the receives of the other in one order, and a pipeline's sends and
  // receives on separate streams never wait on each other inside NCCL.
  std::map<std::string, std::array<std::unique_ptr<Communicator>, 2>> p2p_comms;
  // The communicator of a task's process group; of its direction for a
  // send or receive (the in-process one serves both).
  Communicator& commFor(const Task& t) const;
  Communicator& p2pComm(const Task& t, int sender) const;
  void makeCommunicators();

  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;
  std::vector<cudaEvent_t> join_events;
  cudaEvent_t fork_event = nullptr;
  // Two slots of per-step host state (scalars in, loss and norm out, timing
  // events): step k uses slot k % 2 when steps run ahead, so step k + 1's
  // scalars can be written while step k still runs and step k's loss is
  // still readable while step k + 1 runs.
  static constexpr int kSlots = 2;
  cudaEvent_t start_event[kSlots] = {}, stop_event[kSlots] = {};
  // Recorded after the step's last LoadBatch copy: from then on the host may
  // write the next step's batch into the staging buffers while the GPU
  // computes (runStep), instead of between steps with the GPU idle.
  cudaEvent_t loads_done = nullptr;
  int last_load_task = -1;
  bool load_stream_mixed = false;  // loads on several streams: stage between steps
  int staged_step = -1;  // the step whose batch the staging buffers hold
  std::vector<cudaEvent_t> collective_done;  // recorded after each collective (timeout diagnosis)
  std::vector<int> collective_tasks;

  std::byte* arena = nullptr;
  // One Gemm (with a cuBLASLt workspace of its own) per compute stream, so
  // that GEMMs running side by side never share a workspace; null for the
  // other streams. gemms[0] is the main compute stream's.
  std::vector<std::unique_ptr<Gemm>> gemms;
  Gemm& mainGemm() const { return *gemms.at(0); }
  std::vector<float*> scratch;  // per stream
  // FP8 buffers: the format each holds (by its writer's phase: E5M2 for
  // what the backward writes, E4M3 otherwise, as the CPU reference) and on
  // the device 1 / the scale its last cast used, in a slot of
  // gpu_footprint::kFp8ScaleSlotBytes per FP8 buffer (fp8_slot: by buffer,
  // -1 for the others; null without FP8 buffers).
  std::vector<Fp8Format> fp8_format;
  std::vector<int> fp8_slot;
  std::byte* fp8_scales = nullptr;
  float* fp8ScaleInv(int buffer) const;
  // By task: the partial maxima a SwiGLU kernel writes for the cast of its
  // output and that cast reads instead of taking its input's amax itself
  // (gpu_footprint::fp8AmaxProducers); null for the other tasks.
  std::vector<float*> fp8_amax_partials;
  float* fp8AmaxPartials(int task) const;
  // Delayed scaling (training.fp8_scaling delayed): the cast keys
  // (gpu_footprint::fp8DelayedKeys) and their state on the device, in the
  // same allocation; what task `index` needs to write `buffer` in FP8.
  gpu_footprint::Fp8DelayedKeys fp8_keys;
  Fp8DelayedState fp8_delayed;
  Fp8Write fp8Write(int index, int buffer, int transposed = -1) const;
  // The state as a checkpoint keeps it (engine/numerics/fp8_history.h), and back.
  std::string saveFp8Delayed() const;
  void loadFp8Delayed(const std::string& text);
  StepScalars* scalars = nullptr;
  StepScalars* host_scalars = nullptr;  // pinned, kSlots entries
  float* host_out = nullptr;            // pinned, per slot: loss sum, grad norm
  int norm_buffer = -1;
  bool norm_is_squared = false;  // sharded optimizer: the buffer holds the global sum of squares

  std::vector<LoadSlot> loads;
  std::vector<int> load_of_task;      // EmbeddingBwd task -> LoadSlot
  std::vector<bool> skip;             // cross-entropy backward fused into the forward
  std::vector<double> fused_scale;    // cross-entropy forward -> dlogits scale (0: not fused)
  FusionPlan fusion;                  // cuBLASLt epilogue fusion (fusion.h)
  std::map<int, Table> tables;

  std::vector<void*> allocations;
  std::vector<void*> host_allocations;
  int64_t allocated = 0;
  GpuMemoryReport mem;
  SetupTimes setup_times;
  std::vector<std::byte> staging;  // writeBuffer's conversions, grown to the largest buffer written
  std::vector<cudaEvent_t> task_start, task_end;  // time_tasks only
  std::vector<double> task_ms;
  bool timing_now = false;
  bool capturing = false;  // inside cudaStreamBeginCapture .. EndCapture
  // tuneGemms and replayTasks: tasks issued alone, without the plan's events
  // and unseen by the observer.
  bool issue_alone = false;
  cudaGraphExec_t graph_exec = nullptr;
  bool shared_graph_captured = false;  // ranks sharing one GPU: this rank's part of the LocalWorld's graph
  CudaExecutor::GraphMemsets graph_memsets;
  int steps_done = 0;
  // schedule.optimizer_beside_forward: the plan opens with AdamW tasks that
  // apply the previous step's gradients (attrs.from_previous_step), and the
  // step whose gradients they apply next, or -1.
  bool updates_at_start = false;
  int pending_update = -1;
};

}  // namespace tandem::cuda
