#pragma once
// Turns one run of a trace file into the timeline's model, with the trace
// store's own analyses: the overlap lane shows exactly the intervals behind
// `tandem report`'s overlap and exposed-communication figures (HTA
// definitions, activities classified by the store's Classifier), and the
// per-rank breakdown is the store's Breakdown.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gui/timeline_data.h"
#include "traces/analysis/analysis.h"
#include "traces/store/trace_model.h"

namespace tandem::traces {
class TraceReader;
}

namespace tandem::gui {

// A run that cannot be shown (no activities); files that are not tandem
// traces raise traces::TraceError from the reader.
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A load stopped by its progress callback (LoadOptions::progress).
class LoadCancelled : public LoadError {
 public:
  LoadCancelled() : LoadError("loading cancelled") {}
};

// Progress of a load: percent done and what it is doing ("reading 3.2M of
// 10.0M activities"). Called on the loading thread; returning false cancels
// the load, which then throws LoadCancelled.
using LoadProgress = std::function<bool(int percent, const std::string& stage)>;

struct LoadOptions {
  LoadProgress progress;  // may be empty
  // Runs of at least this many activities are read track by track over two
  // connections (about half the time on an idle machine), with progress
  // after each track; smaller ones in one pass.
  int64_t parallel_from = 1'000'000;
};

struct RankBreakdown {
  int rank = 0;
  traces::Breakdown breakdown;  // over the rank's whole span
  // Over the rank's recorded steps (first start to last end) and how many
  // there are; 0 steps when the run recorded none. A real run's set-up
  // (GEMM algorithm timing, the first copies) lies outside them, so per
  // step figures divide this one.
  traces::Breakdown in_steps;
  int steps = 0;
};

// Where the time of a load went, in seconds.
struct LoadTimings {
  double read_s = 0;      // the trace store reading the run's activities
  double model_s = 0;     // building the timeline's arrays and lanes
  double analysis_s = 0;  // the store's overlap / breakdown analysis
};

struct LoadedRun {
  std::string path;
  LoadTimings timings;
  traces::RunInfo info;
  std::shared_ptr<TimelineData> timeline;
  std::vector<RankBreakdown> breakdown;
  // The run's stats above severity info: what its producer warned about
  // (dropped records, import anomalies, a simulation's calibration).
  std::vector<traces::StatRow> warnings;
  // What the run recorded of its plan (recompute decisions, memory), without
  // the encoded plan; empty for runs that stored none.
  traces::PlanFacts facts;
  int schema_version = 0;  // of the file read (traces/store/schema.h)
};

// Loads run `run` (or the file's default run when run < 0).
LoadedRun loadRun(traces::TraceReader& reader, int64_t run, const LoadOptions& options = {});
// Opens a trace database, or a PyTorch profiler (Kineto) JSON or Nsight
// Systems SQLite export, which is imported once into a trace database in the
// temp folder (reused while the file is unchanged). `LoadedRun::path` is the
// database actually read.
LoadedRun loadRunFile(const std::string& path, int64_t run, const LoadOptions& options = {});
std::string traceDatabaseFor(const std::string& path);

// The same breakdown computed from a model that did not come from a file
// (generated runs): compute and comm by stream kind.
std::vector<RankBreakdown> breakdownFromTimeline(const TimelineData& data);

std::string describeRun(const traces::RunInfo& info);
// The job's own name from the run's job YAML (its `name:` line), else the
// first 12 characters of its content hash.
std::string jobNameOf(const traces::RunInfo& info);

}  // namespace tandem::gui
