#include "traces/merge.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "traces/trace_reader.h"
#include "traces/trace_writer.h"

namespace tandem::traces {

namespace {

// How one rank's timestamps move onto the common clock. With the profiler's
// measured offsets against rank 0 ("rank0-start", "rank0-end" rows: offset_ns
// measured at the rank's own time realtime_ns) the shift is the start offset
// plus the fitted drift, linear in time; otherwise the rank's first row's
// offset_ns (0 for a rank measured against nothing, files merged before).
struct RankClock {
  bool have_first = false;
  int64_t first_offset = 0;
  bool have_start = false, have_end = false;
  int64_t start_at = 0, start_offset = 0, end_at = 0, end_offset = 0;

  void add(const ClockRow& c) {
    if (c.source == "rank0-start") {
      have_start = true, start_at = c.realtime_ns, start_offset = c.offset_ns;
    } else if (c.source == "rank0-end") {
      have_end = true, end_at = c.realtime_ns, end_offset = c.offset_ns;
    } else if (!have_first) {
      have_first = true, first_offset = c.offset_ns;
    }
  }
  int64_t toCommon(int64_t t) const {
    if (!have_start) return t + first_offset;
    if (!have_end || end_at == start_at) return t + start_offset;
    const double drift = double(end_offset - start_offset) / double(end_at - start_at);
    return t + start_offset + int64_t(std::llround(drift * double(t - start_at)));
  }
};

}  // namespace

MergeResult mergeTraces(const std::vector<std::string>& inputs, TraceWriter& w) {
  if (inputs.empty()) throw TraceError("merge: no input files given");
  MergeResult result;
  std::map<int, std::string> owner;  // rank -> input that holds it
  bool begun = false;
  for (const auto& path : inputs) {
    TraceReader r(path);
    int64_t run = r.defaultRunId();
    RunInfo info = r.run(run);
    if (r.activityCount(run) == 0)
      throw TraceError(fmt::format("{}: run {} ('{}') has no activities to merge", path, run, info.name));
    std::set<int> ranks;
    for (const auto& t : r.tracks(run)) ranks.insert(t.rank);
    for (const auto& s : r.streams(run)) ranks.insert(s.rank);
    for (int rank : ranks) {
      auto [it, fresh] = owner.emplace(rank, path);
      if (!fresh) throw TraceError(fmt::format("{}: rank {} is also in {}; each rank must come from one file", path, rank, it->second));
    }
    std::map<int, RankClock> clock_of;
    std::vector<ClockRow> clocks = r.clocks(run);
    for (const auto& c : clocks) clock_of[c.rank].add(c);
    auto shift = [&](int rank, int64_t t) {
      auto it = clock_of.find(rank);
      return it == clock_of.end() ? t : it->second.toCommon(t);
    };
    if (!begun) {
      RunInfo merged = info;
      merged.name = fmt::format("merge of {} files ({}...)", inputs.size(), info.name);
      merged.world_size = std::max(info.world_size, 1);
      w.beginRun(merged);
      begun = true;
    }
    for (const auto& s : r.streams(run)) w.addStream(s);
    r.forEachActivity(run, [&](const ActivityRow& a) {
      ActivityRow b = a;
      b.start_ns = shift(a.rank, a.start_ns);
      b.end_ns = std::max(b.start_ns, shift(a.rank, a.end_ns));
      w.addActivity(b);
      ++result.activities;
    });
    for (auto x : r.ranges(run)) {
      x.start_ns = shift(x.rank, x.start_ns), x.end_ns = std::max(x.start_ns, shift(x.rank, x.end_ns));
      w.addRange(x);
    }
    for (auto x : r.counters(run)) {
      x.ts_ns = shift(x.rank, x.ts_ns);
      w.addCounter(x);
    }
    for (auto x : r.steps(run)) {
      x.start_ns = shift(x.rank, x.start_ns), x.end_ns = std::max(x.start_ns, shift(x.rank, x.end_ns));
      w.addStep(x);
    }
    for (const auto& t : r.planTasks(run)) w.addPlanTask(t);
    for (auto x : r.collectives(run)) {
      x.start_ns = shift(x.rank, x.start_ns), x.end_ns = std::max(x.start_ns, shift(x.rank, x.end_ns));
      w.addCollective(x);
    }
    // The anchors stay; the offset is now part of every timestamp.
    for (auto c : clocks) {
      c.offset_ns = 0;
      w.addClock(c);
    }
    for (const auto& s : r.stats(run)) w.incrementStat(s.name, s.value, s.severity, s.description);
    ++result.inputs;
  }
  w.setStat({"merge.inputs", result.inputs, Severity::Info, "per-rank files merged into this run"});
  w.flush();
  result.run = w.runId();
  result.ranks = static_cast<int>(owner.size());
  return result;
}

}  // namespace tandem::traces
