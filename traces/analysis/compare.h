#pragma once
// Comparing two runs task by task: a real run against its simulation (the
// calibration loop) or configuration A against B. Tasks are matched by
// (rank, plan task id), the join key every writer of the store keeps, when
// both runs come from one plan; runs of two plans (another recompute policy
// or schedule inserts tasks and renumbers the rest) are matched by (rank,
// plan task name) instead, so that an id never pairs two different tasks.
//
// A task's time in a run is the median over steps of its summed activity
// duration per step (a real profile holds many steps, a simulation one), so
// both sides are "time per step".

#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "traces/store/trace_reader.h"

namespace tandem::traces {

struct TaskDelta {
  int rank = 0;
  int64_t task_id = -1;
  std::string name;
  std::string op;
  double a_ns = 0;  // per step, run A (the reference: real)
  double b_ns = 0;  // per step, run B (the prediction: simulated)
  // The share of its time beside another stream's GPU work in each run
  // (TaskTime::beside_share).
  double a_beside = 0, b_beside = 0;
  double errorPct() const { return a_ns > 0 ? 100.0 * (b_ns - a_ns) / a_ns : 0.0; }
};

struct OpError {
  std::string op;
  int64_t tasks = 0;
  double a_total_ns = 0, b_total_ns = 0;  // per step, summed over the op's tasks
  double median_abs_pct = 0, p90_abs_pct = 0, max_abs_pct = 0;
  // The same tasks split by how they ran: alone in both runs
  // (TaskTime::beside_share below kBesideShare in A and in B), or beside
  // another stream's GPU work in either. Alone, a simulated task's error is
  // the cost model's; beside, the kernel-sharing model's too. Medians are 0
  // without tasks.
  int64_t alone_tasks = 0, beside_tasks = 0;
  double alone_median_abs_pct = 0, beside_median_abs_pct = 0;
};

// A task counts as run beside other work when at least this share of its
// time had GPU work of another stream of its rank running.
inline constexpr double kBesideShare = 0.1;

struct RunSide {
  RunInfo run;
  double step_ns = 0;          // p50 of every (rank, step) duration
  double overlap_pct = 0;      // HTA definition, per (rank, step), median over those with communication
  double exposed_comm_ns = 0;  // per (rank, step), median
  double compute_ns = 0;       // per (rank, step), median
  double hidden_comm_ns = 0;   // communication under compute, per (rank, step), median
  double recompute_ns = 0;     // per (rank, step), median
  double idle_ns = 0;          // per (rank, step), median
  int64_t tasks = 0;
  // Each stream's waits between its own activities, per (rank, step),
  // median over those: stream -> (name, ns, ns filled by other streams' work).
  struct Waits {
    std::string name;
    double total_ns = 0, filled_ns = 0;
  };
  std::map<int, Waits> stream_waits;
  // The run's stats above severity info: what its producer warned about
  // (a simulation's calibration, dropped records), said with the comparison
  // so that an error is read against it.
  std::vector<StatRow> warnings;
};

// One stream's waits per (rank, step) in both runs (docs/trace-schema.md,
// stream waits): where one run's stream waits for another stream's work and
// the other's does not, the two schedules differ even when the step times
// agree.
struct StreamWaitDelta {
  int stream = 0;
  std::string name;
  double a_ns = 0, b_ns = 0;
  double a_filled_ns = 0, b_filled_ns = 0;
};

struct RunComparison {
  RunSide a, b;
  double step_error_pct = 0;  // (b - a) / a
  int64_t matched = 0, only_a = 0, only_b = 0;
  // Of only_a / only_b, the tasks that take no time in their run: a
  // simulation writes a zero-length activity for a task fused into another
  // task's kernel, which a real run has no record of.
  int64_t only_a_no_time = 0, only_b_no_time = 0;
  // "plan task id", or "plan task name" when a task id names different tasks
  // in the two runs (two plans).
  std::string matched_by = "plan task id";
  std::vector<OpError> by_op;        // sorted by op name
  std::vector<StreamWaitDelta> stream_waits;  // by stream number
  std::vector<TaskDelta> top_tasks;  // largest |b - a| first
  // One sentence: B's step against A's and the largest contributors
  // (compute, exposed communication, recompute).
  std::string verdict;
};

// Time per step of every (rank, plan task id) of a run: the median over the
// rank's steps of the task's summed activity duration in that step (a run
// without step rows is one step). Only activities that start inside the
// rank's recorded steps count where it has steps: a real run's set-up (GEMM
// algorithm timing) runs tasks' kernels before the first step. `activities`
// is per step, rounded up.
// `op` and `name` are the plan task's op spelling and name when the run
// carries plan tasks (else the name of the task's first activity).
struct TaskTime {
  std::string name;
  std::string op;
  double ns = 0;
  int64_t activities = 0;
  bool planned = false;  // the run has a plan row for the task (name and op are the plan's)
  // The share of its activities' time (over the steps counted) during which
  // another stream of its rank ran kernels or NCCL work: kernels that share
  // the SMs run slower than alone (copies, on their own engines, do not count).
  double beside_share = 0;
};
using TaskKey = std::pair<int, int64_t>;  // rank, plan task id
std::map<TaskKey, TaskTime> taskTimesPerStep(TraceReader& reader, int64_t run);

// Compares run `a_run` of `a` (reference) with run `b_run` of `b`. Both may
// be the same reader. Throws TraceError when either run has no task ids.
// `tandem compare` and the GUI's compare view both show this.
RunComparison compareRuns(TraceReader& a, int64_t a_run, TraceReader& b, int64_t b_run, size_t top_n = 20);

std::string comparisonToText(const RunComparison& c);
std::string comparisonToJson(const RunComparison& c);

}  // namespace tandem::traces
