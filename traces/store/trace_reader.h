#pragma once
// TraceReader: read access to a trace file for the analyses, the exporters,
// the merger and the GUI.
//
// Activities come back per track (rank, stream) as a struct of arrays sorted
// by start time, which is how the analyses and the timeline want them. A
// time window of one track reads only the id ranges (activity_chunks) whose
// time extent meets the window, so a query touches the rows it returns plus
// at most one batch's worth per chunk boundary.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::traces {

// One track's activities, sorted by (start_ns, insertion order).
struct Track {
  int rank = 0;
  int stream = 0;
  std::vector<int64_t> start_ns;
  std::vector<int64_t> end_ns;
  std::vector<ActivityKind> kind;
  std::vector<int32_t> name;  // string id, see TraceReader::string()
  std::vector<int64_t> task_id;
  std::vector<Phase> phase;
  std::vector<int32_t> layer;
  std::vector<int32_t> micro_batch;
  std::vector<int64_t> correlation_id;
  std::vector<int64_t> bytes;
  std::vector<double> flops;

  size_t size() const { return start_ns.size(); }
  // Index of the first activity that starts at or after t_ns.
  size_t lowerBound(int64_t t_ns) const;
};

// Per-track summary written by the writer.
struct TrackInfo {
  int rank = 0;
  int stream = 0;
  int64_t activity_count = 0;
  int64_t min_start_ns = 0;
  int64_t max_end_ns = 0;
  int64_t max_duration_ns = 0;
};

class TraceReader {
 public:
  // Opens an existing trace file read-only. Throws TraceError for a missing,
  // truncated, non-SQLite, foreign or newer file.
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const;
  // The file's trace schema version (schema.h): an older file is read as
  // it is, without what later versions added (plan facts before 2).
  int schemaVersion() const;

  std::vector<RunInfo> runs();
  // The run with this id; throws TraceError naming the runs in the file.
  RunInfo run(int64_t id);
  // The id to use when the user names none: the file's only or latest run.
  int64_t defaultRunId();

  std::vector<StreamRow> streams(int64_t run);
  std::vector<TrackInfo> tracks(int64_t run);
  int64_t activityCount(int64_t run);

  Track loadTrack(int64_t run, int rank, int stream);
  // Activities of one track that overlap [t0_ns, t1_ns).
  Track loadWindow(int64_t run, int rank, int stream, int64_t t0_ns, int64_t t1_ns);
  // Every track of the run, ordered by (rank, stream). Without details the
  // layer and micro_batch arrays stay empty (the analyses do not need them
  // and skipping them saves a sixth of the load time on large runs).
  std::vector<Track> loadRun(int64_t run, bool with_details = true);
  // Calls fn for every activity of the run with its name and geometry
  // resolved, ordered by (rank, stream, start).
  void forEachActivity(int64_t run, const std::function<void(const ActivityRow&)>& fn);

  std::vector<StepRow> steps(int64_t run);
  std::vector<RangeRow> ranges(int64_t run);
  std::vector<CounterRow> counters(int64_t run);
  std::vector<StatRow> stats(int64_t run);
  std::vector<PlanTaskRow> planTasks(int64_t run);
  std::vector<CollectiveRow> collectives(int64_t run);
  std::vector<ClockRow> clocks(int64_t run);
  // The run's plan facts; empty for a run that stored none (imported, or
  // written before trace schema 2). Without with_plan the encoded plan
  // (tens to hundreds of KiB) is not read.
  PlanFacts planFacts(int64_t run, bool with_plan = true);

  // The interned string with this id ("" for an unknown id).
  const std::string& string(int64_t id);
  const std::vector<std::string>& strings();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::traces
