#pragma once
// The analyses behind `tandem report`: plain structs computed from one run.
//
// Definitions follow Holistic Trace Analysis (HTA) where it has them. With U
// the union of the activities of a category on one rank (all its GPU
// streams merged, so concurrent streams are not double counted):
//   span         = last end - first start of the rank's GPU activity (or the step window)
//   idle         = span - |U all GPU activity|
//   overlap %    = |U compute ∩ U comm| / |U comm| * 100
//   exposed comm = |U comm \ U compute|
// The exclusive breakdown (compute, exposed comm, memcpy not hidden by either,
// sync not hidden by any, idle) sums exactly to the span.
// Percentiles use the nearest-rank method: p-th = sorted[ceil(p/100 n) - 1].

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "traces/analysis/classify.h"
#include "traces/analysis/interval_set.h"
#include "traces/store/trace_model.h"

namespace tandem::traces {

class TraceReader;
struct Track;

// Which part of a run a report describes. A run with recorded steps is
// reported over its steps (from the first step's start to the last step's
// end on each rank): start-up and set-up before them and the tail after
// them are summarized apart (RunReport::window). WholeRun reports every
// activity, as runs without steps always are.
enum class ReportWindow { Steps, WholeRun };

struct AnalysisOptions {
  Classifier classifier;
  ReportWindow window = ReportWindow::Steps;
  int step = -1;  // with ReportWindow::Steps, one step index only (-1: every step)
  int64_t kernel_wait_threshold_ns = 30;  // HTA: gaps shorter than this are "kernel wait"
  size_t top_names = 20;                  // rows of the by-name kernel table
  size_t critical_path_tasks = 50;        // tasks listed on the critical path
  size_t idle_gap_pairs = 10;             // rows of the idle-gap table
  size_t stream_wait_pairs = 10;          // rows of the stream-wait table
};

struct Breakdown {
  int64_t span_ns = 0;
  int64_t busy_ns = 0;  // |U all GPU activity|
  int64_t idle_ns = 0;
  int64_t compute_ns = 0;  // |U compute|
  int64_t comm_ns = 0;     // |U comm|
  int64_t memcpy_ns = 0;   // |U memcpy|
  int64_t sync_ns = 0;     // |U sync|
  int64_t overlap_ns = 0;  // |U compute ∩ U comm|
  int64_t exposed_comm_ns = 0;
  // Point-to-point transfers (activity kinds send and recv: pipeline
  // stages' activations and gradients) and, of the exposed communication,
  // the part where nothing but they run (no compute, no other collective):
  // a stage waiting for its neighbour (the pipeline bubble) and the
  // transfers' own time.
  int64_t p2p_ns = 0;
  int64_t exposed_p2p_ns = 0;
  int64_t memcpy_exclusive_ns = 0;  // memcpy under neither compute nor comm
  int64_t sync_exclusive_ns = 0;    // sync under no other GPU activity
  int64_t recompute_ns = 0;         // |U activities of the recompute phase|
  double overlap_pct = 0;           // 0 when there is no communication
  double recompute_share_pct = 0;   // recompute_ns / span_ns * 100
};

// HTA's idle time breakdown, per stream gaps summed over the rank's streams.
struct IdleBreakdown {
  int64_t gaps = 0;
  int64_t host_wait_ns = 0;    // the next kernel's launch began after the previous kernel ended
  int64_t kernel_wait_ns = 0;  // gap shorter than the kernel wait threshold
  int64_t other_ns = 0;
  bool has_launch_records = false;
};

struct RankReport {
  int rank = 0;
  int64_t activities = 0;
  int64_t first_ns = 0;
  int64_t last_ns = 0;
  Breakdown breakdown;
  IdleBreakdown idle;
};

struct StepReport {
  int rank = 0;
  int step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  Breakdown breakdown;
};

struct Distribution {
  int64_t count = 0;
  int64_t min = 0, max = 0, p50 = 0, p95 = 0;
  double mean = 0;
};

struct StepSummary {
  bool synthesized = false;  // no step rows: one step per rank spanning its activity
  Distribution duration_ns;  // over every (rank, step)
  Distribution max_over_ranks_ns;  // per step index, the slowest rank's duration
};

struct KernelStat {
  std::string key;       // op kind, or kernel name in its compact form (kernel_names.h)
  std::string symbol;    // by name: the name as recorded (a mangled symbol where the trace had one)
  std::string category;  // compute, comm, ...
  int64_t count = 0;
  int64_t total_ns = 0;
  double mean_ns = 0;
  int64_t p50_ns = 0;
  int64_t p95_ns = 0;
  // The activities' own flops and bytes; for a profiled run's kernels, which
  // carry none, their plan tasks' once per execution (by op only).
  double flops = 0;
  int64_t bytes = 0;
  double tflops = 0;  // flops / the time of the activities they come from
  double gbps = 0;    // bytes / the time of the activities they come from (1e9 bytes/s)
};

struct Attribution {
  int64_t gpu_activities = 0;
  int64_t attributed = 0;  // carrying a plan task id
  int64_t compute_kernels = 0;  // kernels of the compute category (the plan's work in a tandem run)
  int64_t compute_attributed = 0;
  double share_pct = 0;
  int64_t unattributed_names = 0;
  std::vector<std::pair<std::string, int64_t>> top_unattributed;  // name, total ns
};

struct CriticalTask {
  int64_t task_id = -1;
  std::string name;
  std::string phase;
  int stream = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t wait_before_ns = 0;  // gap between the predecessor's end and this start
};

struct CriticalPath {
  bool available = false;  // needs activities with task ids
  int rank = -1;           // the rank whose path is the longest
  int step = -1;           // the step it was taken in (that rank's median step); -1: the whole run
  int64_t steps_recorded = 0;  // that rank's steps
  int64_t length_ns = 0;   // first start to last end along the path
  int64_t busy_ns = 0;
  int64_t wait_ns = 0;
  int64_t task_count = 0;
  std::map<std::string, int64_t> by_phase_ns;
  std::map<std::string, int64_t> by_category_ns;
  std::vector<CriticalTask> tasks;  // the last `critical_path_tasks` tasks of the path
};

// Idle gaps of the GPU charged to the work around them (analysis_gaps.cpp).
struct IdleGapPair {
  std::string before;  // op (plan tasks) or name of the activity that ended last
  std::string after;   // ... and of the one that ended the gap
  int64_t count = 0;
  int64_t total_ns = 0;
};

struct IdleGaps {
  int64_t steps = 0;  // step windows counted, over all ranks (0: whole runs)
  int64_t gaps = 0;
  int64_t total_ns = 0;
  int64_t pair_kinds = 0;          // distinct (before, after) pairs
  std::vector<IdleGapPair> pairs;  // the largest by total time
};

// The waits of each stream between its own pieces of GPU work, charged to
// the work around them on that stream (analysis_gaps.cpp). Part of a wait
// may be filled by other streams' work; only the rest is idle GPU time, so
// a wait that is filled costs a step nothing while the GPU is busy anyway
// (at its power cap, for instance).
struct StreamWaitPair {
  int stream = 0;
  std::string stream_name;
  std::string before;  // op (plan tasks) or name of the stream's work before the wait
  std::string after;   // ... and after it
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t filled_ns = 0;  // of total_ns, while another stream of the rank ran GPU work
};

struct StreamWaitTotal {
  int stream = 0;
  std::string stream_name;
  int64_t waits = 0;
  int64_t total_ns = 0;
  int64_t filled_ns = 0;
  // Medians over the (rank, step) windows of the ranks that have the stream
  // (one window per rank without recorded steps): a real run's first step
  // (graph capture, NCCL set-up) does not weigh on them as on the sums.
  int64_t p50_step_ns = 0;
  int64_t p50_step_filled_ns = 0;
};

struct StreamWaits {
  int64_t steps = 0;  // step windows counted, over all ranks (0: whole runs)
  int64_t waits = 0;
  int64_t total_ns = 0;
  int64_t filled_ns = 0;
  std::vector<StreamWaitTotal> streams;  // every stream that waited, the longest total first
  int64_t pair_kinds = 0;                // distinct (stream, before, after)
  std::vector<StreamWaitPair> pairs;     // the largest by total time
};

struct StragglerRank {
  int rank = 0;
  int64_t last_count = 0;  // collectives this rank entered last
  double mean_delay_ns = 0;  // start - earliest start of the same collective
  int64_t max_delay_ns = 0;
};

struct Stragglers {
  int64_t collectives_matched = 0;
  int straggler_rank = -1;  // the rank most often last; -1 when none
  std::vector<StragglerRank> ranks;
};

// What a report covered and what it left out.
struct WindowReport {
  std::string covers;        // "steps 0-9", "step 4", "the whole run" ("...: no steps recorded")
  bool whole_run = true;
  bool one_step = false;  // --step N: the steps before it are left out too
  int first_step = -1, last_step = -1;
  // Activities left out, by where they lie on their rank: before the
  // window (start-up, set-up and, for one step, the steps before it) and
  // after it (the tail); GPU time is the sum of their durations.
  int64_t before_activities = 0, before_gpu_ns = 0;
  int64_t after_activities = 0, after_gpu_ns = 0;
  std::vector<std::pair<std::string, int64_t>> top_outside;  // compact name, GPU ns; the longest first
};

struct RunReport {
  RunInfo run;
  WindowReport window;
  int64_t activity_count = 0;
  std::vector<RankReport> ranks;
  Breakdown total;  // sums over ranks (overlap % recomputed from the sums)
  std::vector<StepReport> steps;
  StepSummary step_time;
  std::vector<KernelStat> by_op;
  std::vector<KernelStat> by_name;
  // Synchronization records (the host waiting on the GPU, cudaEventSynchronize;
  // a stream waiting on an event, cudaStreamWaitEvent), apart from the GPU
  // work above, by name.
  std::vector<KernelStat> host_calls;
  Attribution attribution;
  CriticalPath critical_path;
  IdleGaps idle_gaps;
  StreamWaits stream_waits;
  Stragglers stragglers;
  std::vector<StatRow> stats;
};

// Runs every analysis on one run of an open file. Throws TraceError for an
// unknown run or a run without activities.
RunReport analyzeRun(TraceReader& reader, int64_t run, const AnalysisOptions& options = {});

// The category of every (kind, name id) pair of a file, decided once.
class CategoryTable {
 public:
  CategoryTable(const Classifier& classifier, const std::vector<std::string>& strings);
  Category of(ActivityKind kind, int32_t name) const {
    return table_[static_cast<size_t>(name) * kKinds + static_cast<size_t>(kind)];
  }

 private:
  static constexpr size_t kKinds = 8;
  std::vector<Category> table_;
};

// The interval unions of one rank from which every breakdown figure follows.
struct RankSets {
  IntervalSet all, compute, comm, memcpy, sync, recompute;
  IntervalSet overlap;          // compute ∩ comm
  IntervalSet exposed_comm;     // comm \ compute
  IntervalSet p2p;              // comm activities of kind send or recv
  IntervalSet exposed_p2p;      // p2p \ (compute ∪ other comm)
  IntervalSet memcpy_exclusive; // memcpy \ (compute ∪ comm)
  IntervalSet sync_exclusive;   // sync \ (compute ∪ comm ∪ memcpy)
};

// Host activity is left out: the breakdown describes the GPU's time.
RankSets buildRankSets(const std::vector<const Track*>& tracks, const CategoryTable& categories);
Breakdown breakdownOf(const RankSets& sets, int64_t window_start_ns, int64_t window_end_ns);
Distribution distributionOf(std::vector<int64_t> values);

}  // namespace tandem::traces
