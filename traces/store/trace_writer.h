#pragma once
// TraceWriter: the one way rows get into a trace file.
//
//   tandem::traces::TraceWriter w("run.sqlite");
//   int64_t run = w.beginRun(info);          // a new run, appended to the file
//   w.addStream({...}); w.addActivity({...}); ...
//   w.flush();                               // optional; the destructor flushes
//
// Rows are inserted through prepared statements inside a transaction that is
// committed every `batch_rows` rows and on flush(); a full batch is written
// by a background thread while the caller keeps adding rows (one batch in
// flight at most). The file is in WAL mode, so a crash leaves every committed
// batch readable. Names are interned into the file's `strings` table.
// Opening an existing tandem file appends; a foreign, newer or damaged file
// throws TraceError. A failure while writing a background batch is thrown by
// the next call that waits for it (a later batch, flush()). Not thread-safe:
// one writer per thread (or guard it).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "traces/store/trace_model.h"

namespace tandem::traces {

struct WriterOptions {
  int64_t batch_rows = 50000;  // rows per committed transaction
  bool truncate = false;       // start a new file even if one exists
};

class TraceWriter {
 public:
  explicit TraceWriter(const std::string& path, WriterOptions options = {});
  ~TraceWriter();  // flushes; never throws
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Starts a run; every row added afterwards belongs to it. Returns its id.
  int64_t beginRun(const RunInfo& info);
  int64_t runId() const;

  void addStream(const StreamRow& row);
  void addActivity(const ActivityRow& row);
  void addRange(const RangeRow& row);
  void addCounter(const CounterRow& row);
  void addStep(const StepRow& row);
  void addPlanTask(const PlanTaskRow& row);
  void addCollective(const CollectiveRow& row);
  void addClock(const ClockRow& row);
  // The run's plan facts (trace_model.h, PlanFacts); a second call replaces
  // the first. Written with the next commit like every other row.
  void setPlanFacts(const PlanFacts& facts);

  // Sets a named stat of the run (replaces an earlier value).
  void setStat(const StatRow& row);
  // Adds delta to a named stat, creating it with the given severity.
  void incrementStat(std::string_view name, int64_t delta = 1, Severity severity = Severity::Info,
                     std::string_view description = {});
  // The same with a row built from a declaration (traces/trackers/stats.h):
  // its value is the delta.
  void incrementStat(const StatRow& delta);

  // Returns the id of a string in the file's string table, adding it if new.
  int64_t intern(std::string_view s);

  // Commits the rows added so far.
  void flush();

  int64_t rowsWritten() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::traces
