#pragma once
// Comparing two runs (real vs simulated, A vs B): tasks aligned by plan task
// name (equal to the task id join for runs of one plan; robust when another
// policy renumbers the tasks), each task's time per step (its activities
// inside the recorded steps, summed, over the number of steps) and the
// difference, and a summary of where the time went per step (compute,
// exposed communication, recompute, step). Qt-free.

#include <cstdint>
#include <string>
#include <vector>

#include "gui/run_loader.h"
#include "gui/timeline_data.h"

namespace tandem::gui {

struct TaskDelta {
  int32_t task_id = -1;  // in B
  std::string name;
  std::string phase;
  std::string stream;
  int64_t count_a = 0, count_b = 0;  // activities inside the steps
  double mean_a_ns = 0, mean_b_ns = 0;  // time per step
  double delta_ns() const { return mean_b_ns - mean_a_ns; }
};

struct CompareSummaryRow {
  std::string metric;  // "step", "compute", "exposed comm", "hidden comm", "recompute"
  double a_ns = 0;
  double b_ns = 0;
};

struct Comparison {
  std::vector<TaskDelta> tasks;          // sorted by |delta|, largest first
  std::vector<CompareSummaryRow> summary;
  int64_t matched = 0;                   // tasks found in both runs
  int64_t only_a = 0, only_b = 0;
  std::string verdict;                   // one sentence: what got faster or slower
};

// Compares rank `rank` of a and b. Per-step figures divide by the number of
// steps of each run (at least one).
Comparison compareRuns(const TimelineData& a, const std::vector<RankBreakdown>& a_breakdown,
                       const TimelineData& b, const std::vector<RankBreakdown>& b_breakdown, int rank = 0);

}  // namespace tandem::gui
