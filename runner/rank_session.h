#pragma once
// One rank of a real run: the CUDA executor for the rank's program, and,
// when profiling, the CUPTI profiler joined to it by the plan observer. The
// rank runner of `tandem run` (runner/run_rank.h) drives one per process;
// the GPU benchmarks drive one per rank thread. Everything a rank does
// between "the plan is built" and "the steps are measured" lives here, once.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/cuda/executor.h"
#include "engine/plan/plan.h"
#include "profiler/profiler.h"  // its types; the profiler itself only where it was built
#include "runner/checkpoint_settings.h"
#include "traces/store/trace_model.h"

namespace tandem::plan_trace {
class PlanObserver;
}

namespace tandem::runner {

// Whether this build can profile (the CUPTI profiler was built).
bool profilingAvailable();
// A rank's profile summary in one line (kernels attributed, dropped records, ...).
std::string profileSummaryLine(const profiler::ProfileSummary& summary);

// Where `tandem run --placement` put the ranks: the CUDA device (index
// among its host's GPUs) of every rank and the map it came from. Empty:
// each rank on its local rank's GPU, as the launcher numbers them.
struct RunPlacement {
  std::vector<int> device_of_rank;
  std::string source;  // the map file, or "auto (...)"
};

// The replica check found ranks whose parameters differ; what() is the
// line naming the step, the ranks and the first tensor.
class ReplicaMismatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SessionOptions {
  cuda::ExecutorOptions executor;  // rank, world, device, graph or eager, NCCL id, timeout
  CheckpointSettings checkpoints;
  RunPlacement placement;          // recorded in the run's stats
  // The rank's profile file (one run per rank file, started afresh); empty:
  // no profiling. Needs profilingAvailable().
  std::string profile_path;
  // Ranks sharing one process (`tandem run --ranks-per-gpu`): the process's
  // one profiler (makeSharedProfiler), which this rank's tasks join; not
  // owned. Instead of profile_path.
  profiler::Profiler* shared_profiler = nullptr;
};

// The one profiler of ranks sharing this process and GPU `device`, writing
// every rank's records into `path` (started afresh). Needs profilingAvailable().
std::unique_ptr<profiler::Profiler> makeSharedProfiler(const Plan& plan, const std::string& path, int device);

// The run row a real run of `plan` on device `device` writes: job, host,
// devices, tool version, plan format.
traces::RunInfo realRunInfo(const Plan& plan, int device);

// The recompute, micro-batch and LM-head choices whose plan fits
// `free_bytes` with the executor's own buffers, as one line for an
// out-of-memory message.
std::string fittingChoices(const JobSpec& job, int64_t free_bytes);

// Figures of the steady state: the steps after the first three (graph
// capture, cuBLASLt heuristics, warm-up), medians.
struct StepStats {
  double median_ms = 0;       // GPU time per step
  double median_wall_ms = 0;  // wall time between two step ends, as a training loop sees it
  double tokens_per_s = 0;
  double mfu = 0;             // PaLM model FLOPs utilisation over the world's peak
};

// The stats a real run's record carries about its steady state and memory
// (tokens per second, MFU, planned and allocated bytes) and, when a
// placement chose the GPUs, the device of every rank and the map's name.
std::vector<traces::StatRow> summaryStats(const Plan& plan, const StepStats& stats,
                                          const cuda::GpuMemoryReport& memory, const RunPlacement& placement = {});

class RankSession {
 public:
  // Builds the profiler (if asked) and the executor. A plan that does not fit
  // the device throws cuda::OutOfDeviceMemory whose message names the choices
  // that would (fittingChoices).
  RankSession(const Plan& plan, const SessionOptions& options);
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  cuda::CudaExecutor& executor() { return *executor_; }
  const cuda::DeviceInfo& device() const { return device_; }
  // Null unless profiling (the shared profiler where ranks share the process).
  profiler::Profiler* profiler() { return profiler_ ? profiler_.get() : options_.shared_profiler; }

  // This rank's clock against rank 0's (NCCL ping-pong), outside the steps;
  // stored in the profile when profiling. Every rank's offset (rank 0's first);
  // empty on one rank.
  std::vector<cuda::ClockOffset> measureClocks(bool at_end);

  // With checkpoints.resume: the state of the newest complete checkpoint
  // put back; the folder (empty when there was none to resume from).
  std::string resumeIfAsked();

  // Runs `steps` steps, the next one queued behind the running one, calling
  // `each` as each step ends (on this thread). With checkpoints every N
  // steps the steps run in runs of N, the state copied out between them and
  // written while the next run goes on; the last write is waited for. Runs
  // also end where a replica check falls; a mismatch is recorded in the
  // profile (stat replica_check.mismatch) and thrown as
  // ReplicaMismatchError once the checkpoint being written is complete.
  std::vector<cuda::GpuStepResult> run(int steps, const std::function<void(const cuda::GpuStepResult&)>& each);
  // The steady-state figures of the last run().
  StepStats stats() const;
  // What checkpoints cost this session's runs so far: copy-outs (the step
  // loop waits for each) and the writer's account; nothing without
  // checkpoints.
  struct CheckpointCost {
    int copies = 0;
    double copy_s = 0;
    double first_copy_s = 0;  // the first copy-out alone: it also allocates and page-locks the host memory
    int64_t copy_bytes = 0;  // this rank's part
    checkpoint::WriteCost writes;
  };
  std::optional<CheckpointCost> checkpointCost() const;
  // The replica checks run (--check-replicas-every) and their time, the
  // GPU's and the step loop's together.
  struct ReplicaChecks {
    int checks = 0;
    double seconds = 0;
  };
  std::optional<ReplicaChecks> replicaChecks() const;

  // Stores the run's summary stats in the profile and closes it (a shared
  // profiler: called on one rank's session, once every rank is done).
  profiler::ProfileSummary finishProfile();

 private:
  const Plan& plan_;
  SessionOptions options_;
  cuda::DeviceInfo device_;
  std::unique_ptr<profiler::Profiler> profiler_;
  std::unique_ptr<plan_trace::PlanObserver> observer_;
  std::unique_ptr<cuda::CudaExecutor> executor_;
  std::unique_ptr<checkpoint::AsyncWriter> writer_;
  std::vector<cuda::GpuStepResult> results_;
  std::vector<std::chrono::steady_clock::time_point> ended_;
  CheckpointCost checkpoint_cost_;
  ReplicaChecks replica_checks_;
  void checkReplicasAt(int step);
};

}  // namespace tandem::runner
