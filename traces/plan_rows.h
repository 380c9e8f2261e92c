#pragma once
// A rank's plan as the trace store keeps it: one PlanTaskRow per task, with
// the dependencies every kind of run stores (the previous task on the same
// stream, and the recorder of each event the task waits for). The
// simulator's trace output and the profiler's bridge both write these rows,
// so a real run and its simulation carry the same graph by construction
// (`tandem compare` matches their tasks by id). Header-only: the store's
// library itself never depends on the engine.
#include <string>
#include <vector>

#include "engine/plan.h"
#include "traces/trace_model.h"

namespace tandem::traces {

inline TracePhase tracePhaseOf(Phase p) {
  switch (p) {
    case Phase::Forward: return TracePhase::Forward;
    case Phase::Backward: return TracePhase::Backward;
    case Phase::Recompute: return TracePhase::Recompute;
    case Phase::Optimizer: return TracePhase::Optimizer;
    case Phase::Comm: return TracePhase::Comm;
    case Phase::Data: return TracePhase::Data;
  }
  return TracePhase::None;
}

inline StreamKind traceStreamKindOf(tandem::StreamKind k) {
  switch (k) {
    case tandem::StreamKind::Compute: return StreamKind::Compute;
    case tandem::StreamKind::Comm: return StreamKind::Comm;
    case tandem::StreamKind::Copy: return StreamKind::Copy;
  }
  return StreamKind::Compute;
}

inline std::vector<PlanTaskRow> planTaskRows(int rank, const RankPlan& rp) {
  std::vector<int64_t> recorder(size_t(rp.num_events > 0 ? rp.num_events : 0), -1);
  for (const Task& t : rp.tasks)
    if (t.record_event >= 0 && t.record_event < rp.num_events) recorder[size_t(t.record_event)] = t.id;
  std::vector<int64_t> last_on_stream(rp.streams.size(), -1);
  std::vector<PlanTaskRow> rows;
  rows.reserve(rp.tasks.size());
  for (const Task& t : rp.tasks) {
    PlanTaskRow row;
    row.rank = rank;
    row.task_id = t.id;
    row.name = t.name;
    row.op = t.collective ? std::string(toString(t.collective->op)) : std::string(toString(t.op));
    row.phase = tracePhaseOf(t.phase);
    row.layer = t.layer;
    row.micro_batch = t.micro_batch;
    row.stream = t.stream;
    row.flops = t.flops;
    row.bytes = t.collective ? t.collective->bytes : t.bytes_read + t.bytes_written;
    if (t.stream >= 0 && size_t(t.stream) < last_on_stream.size()) {
      if (last_on_stream[size_t(t.stream)] >= 0) row.deps.push_back(last_on_stream[size_t(t.stream)]);
      last_on_stream[size_t(t.stream)] = t.id;
    }
    for (int e : t.wait_events)
      if (e >= 0 && size_t(e) < recorder.size() && recorder[size_t(e)] >= 0) row.deps.push_back(recorder[size_t(e)]);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tandem::traces
