#pragma once
// The analyses analyzeRun() assembles, one file each. Internal to traces/;
// every function takes one run's tracks already grouped by rank.

#include <map>
#include <vector>

#include "traces/analysis/analysis.h"
#include "traces/store/trace_reader.h"

namespace tandem::traces::detail {

struct RankTracks {
  int rank = 0;
  std::vector<const Track*> tracks;
};

// The report's window on each rank and the recorded steps inside it
// (window.cpp). Throws TraceError for a step index the run does not have.
struct Window {
  std::map<int, std::pair<int64_t, int64_t>> by_rank;  // [from, to); empty: the whole run
  std::vector<StepRow> steps;                           // recorded steps inside the window
  WindowReport report;
};
Window chooseWindow(const std::vector<StepRow>& steps, const AnalysisOptions& options, const std::string& path,
                    int64_t run);
// The activities that start inside their rank's window (all of them for the
// whole run); the others are counted into window.report.
std::vector<Track> keepInside(std::vector<Track> tracks, Window& window, const std::vector<std::string>& strings,
                              const CategoryTable& categories);

IdleBreakdown idleBreakdownOf(const RankTracks& rank, const CategoryTable& categories, int64_t threshold_ns);

// Untagged work on the executor's set-up track (kSetupStreamName) goes
// under the op "set-up", apart from the steps' unattributed kernels.
// Kernels without flops or bytes of their own (a profiled run's) get their
// op's rates from the plan tasks' figures, once per task and recorded step.
void kernelStatistics(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                      const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                      const std::vector<StreamRow>& streams, const std::vector<StepRow>& steps,
                      const AnalysisOptions& options, RunReport& report);

CriticalPath criticalPath(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                          const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                          const std::vector<StepRow>& steps, size_t max_tasks);

IdleGaps idleGaps(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                  const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                  const std::vector<StepRow>& steps, size_t max_pairs);

// streams: the run's stream rows, for the streams' names.
StreamWaits streamWaits(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                        const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                        const std::vector<StepRow>& steps, const std::vector<StreamRow>& streams, size_t max_pairs);

Stragglers stragglers(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                      const std::vector<CollectiveRow>& collectives);

}  // namespace tandem::traces::detail
