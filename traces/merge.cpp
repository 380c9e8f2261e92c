#include "traces/merge.h"

#include <fmt/core.h>

#include <map>
#include <set>

#include "traces/trace_reader.h"
#include "traces/trace_writer.h"

namespace tandem::traces {

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
    std::map<int, int64_t> offset;
    std::vector<ClockRow> clocks = r.clocks(run);
    for (const auto& c : clocks) offset.emplace(c.rank, c.offset_ns);
    auto shift = [&](int rank) {
      auto it = offset.find(rank);
      return it == offset.end() ? int64_t{0} : it->second;
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
      int64_t d = shift(a.rank);
      b.start_ns += d;
      b.end_ns += d;
      w.addActivity(b);
      ++result.activities;
    });
    for (auto x : r.ranges(run)) {
      x.start_ns += shift(x.rank), x.end_ns += shift(x.rank);
      w.addRange(x);
    }
    for (auto x : r.counters(run)) {
      x.ts_ns += shift(x.rank);
      w.addCounter(x);
    }
    for (auto x : r.steps(run)) {
      x.start_ns += shift(x.rank), x.end_ns += shift(x.rank);
      w.addStep(x);
    }
    for (const auto& t : r.planTasks(run)) w.addPlanTask(t);
    for (auto x : r.collectives(run)) {
      x.start_ns += shift(x.rank), x.end_ns += shift(x.rank);
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
