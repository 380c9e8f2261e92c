#include "traces/store/merge.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"
#include "traces/trackers/stats.h"

namespace tandem::traces {

namespace {

// How one rank's timestamps move onto the common clock. With the profiler's
// measured offsets against rank 0 ("rank0-start", "rank0-end" rows: offset_ns
// measured at the rank's own time realtime_ns; round trips in the stats
// clock.offset_rtt_ns.rankN and clock.offset_end_rtt_ns.rankN) the shift is
// the start offset plus the drift fitted between the two, linear in time;
// otherwise the rank's first row's offset_ns (0 for a rank measured against
// nothing, and for files from before).
//
// A measurement is only known within half its round trip. When the round
// trips are known, two measurements that agree within that (|end - start| <=
// (rtt_start + rtt_end) / 2) give no drift, only their mean; and offsets that
// are all within their uncertainty of 0 (ranks of one host, which share
// CLOCK_REALTIME) give no shift at all.
struct RankClock {
  bool have_first = false;
  int64_t first_offset = 0;
  bool have_start = false, have_end = false;
  int64_t start_at = 0, start_offset = 0, end_at = 0, end_offset = 0;
  int64_t start_rtt = -1, end_rtt = -1;
  // The model: offset(t) = base + drift * (t - base_at).
  int64_t base = 0, base_at = 0;
  double drift = 0;

  void add(const ClockRow& c) {
    if (!traceTimeInRange(c.realtime_ns) || !traceTimeInRange(c.offset_ns))
      throw TraceError(fmt::format("rank {}'s clock row '{}' (at {} ns, offset {} ns) lies outside the trace's range "
                                   "of +-2^62 ns (a damaged clock table?)",
                                   c.rank, c.source, c.realtime_ns, c.offset_ns));
    if (c.source == "rank0-start") {
      have_start = true, start_at = c.realtime_ns, start_offset = c.offset_ns;
    } else if (c.source == "rank0-end") {
      have_end = true, end_at = c.realtime_ns, end_offset = c.offset_ns;
    } else if (!have_first) {
      have_first = true, first_offset = c.offset_ns;
    }
  }
  // Sums and differences of two in-range times can pass 2^63: long double.
  static bool within(int64_t value, int64_t rtt) { return rtt >= 0 && 2.0L * std::fabs((long double)value) <= rtt; }
  void fit() {
    base_at = start_at;
    drift = 0;
    if (!have_start) {
      base = first_offset;
      return;
    }
    const bool two = have_end && end_at != start_at;
    const bool rtts = start_rtt >= 0 && (!two || end_rtt >= 0);
    if (!two) {
      base = rtts && within(start_offset, start_rtt) ? 0 : start_offset;
      return;
    }
    const long double change = (long double)end_offset - start_offset;
    if (rtts && 2.0L * std::fabs(change) <= (long double)start_rtt + end_rtt) {
      const bool zero = within(start_offset, start_rtt) && within(end_offset, end_rtt);
      base = zero ? 0 : int64_t(start_offset + change / 2);
      return;
    }
    base = start_offset;
    drift = double(change / ((long double)end_at - start_at));
  }
  // In long double, so that a damaged offset or drift gives an error rather
  // than an overflow; times stay within the trace's range.
  int64_t toCommon(int64_t t, int rank) const {
    const long double shifted = (long double)t + base + std::round(drift * ((long double)t - base_at));
    if (!floatTraceTimeInRange(shifted))
      throw TraceError(fmt::format("rank {}'s clock offsets move time {} ns outside the trace's range of +-2^62 ns "
                                   "(a damaged clock table?)",
                                   rank, t));
    return int64_t(shifted);
  }
};

// A run-level figure every rank wrote alike (declared MergeRule::Max): the
// largest is kept, where counts add up.
bool isRunLevelStat(const std::string& name) {
  const stats::StatDecl* d = stats::find(name);
  return d && d->merge == stats::MergeRule::Max;
}

// The merged run's devices: every input's devices_json array, each device
// tagged with its input's rank where the input holds one rank and the entry
// names none (a per-rank profile records its own GPU only). Inputs whose
// devices_json is not a JSON array add nothing; when none is, the first
// input's text stays as it was.
std::string mergedDevices(const std::vector<std::string>& inputs) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  std::string first;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TraceReader r(inputs[i]);
    const int64_t run = r.defaultRunId();
    const std::string text = r.run(run).devices_json;
    if (i == 0) first = text;
    std::set<int> ranks;
    for (const auto& s : r.streams(run)) ranks.insert(s.rank);
    const auto devices = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!devices.is_array()) continue;
    for (auto d : devices) {
      if (d.is_object() && !d.contains("rank") && ranks.size() == 1) {
        nlohmann::ordered_json tagged = {{"rank", *ranks.begin()}};
        tagged.update(d);
        d = std::move(tagged);
      }
      all.push_back(std::move(d));
    }
  }
  return all.empty() ? first : all.dump();
}

}  // namespace

MergeResult mergeTraces(const std::vector<std::string>& inputs, TraceWriter& w) {
  if (inputs.empty()) throw TraceError("merge: no input files given");
  MergeResult result;
  std::map<int, std::string> owner;  // rank -> input that holds it
  bool begun = false;
  const std::string devices = mergedDevices(inputs);
  std::map<std::string, int64_t> run_level;  // isRunLevelStat: the largest value over the inputs
  auto mergeOne = [&](const std::string& path) {
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
      if (!fresh)
        throw TraceError(
            fmt::format("{}: rank {} is also in {}; each rank must come from one file", path, rank, it->second));
    }
    std::map<int, RankClock> clock_of;
    std::vector<ClockRow> clocks = r.clocks(run);
    // The clock model's errors name the rank; the file is added here.
    auto inFile = [&](auto&& fn) {
      try {
        return fn();
      } catch (const TraceError& e) {
        throw TraceError(fmt::format("{}: {}", path, e.what()));
      }
    };
    for (const auto& c : clocks) inFile([&] { clock_of[c.rank].add(c); });
    const std::vector<StatRow> stats = r.stats(run);
    for (const auto& st : stats) {
      if (int k = stats::rankOf(stats::kClockOffsetRttNs, st.name); k >= 0 && clock_of.count(k))
        clock_of[k].start_rtt = st.value;
      if (int k = stats::rankOf(stats::kClockOffsetEndRttNs, st.name); k >= 0 && clock_of.count(k))
        clock_of[k].end_rtt = st.value;
    }
    for (auto& [rank, c] : clock_of) c.fit();
    auto shift = [&](int rank, int64_t t) {
      auto it = clock_of.find(rank);
      return it == clock_of.end() ? t : inFile([&] { return it->second.toCommon(t, rank); });
    };
    if (!begun) {
      RunInfo merged = info;
      merged.name = fmt::format("merge of {} files ({}...)", inputs.size(), info.name);
      merged.world_size = std::max(info.world_size, 1);
      merged.devices_json = devices;
      w.beginRun(merged);
      // The ranks ran one plan: its facts come with the first file.
      if (const PlanFacts facts = r.planFacts(run); !facts.empty()) w.setPlanFacts(facts);
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
    for (const auto& s : stats) {
      if (!isRunLevelStat(s.name)) {
        w.incrementStat(s.name, s.value, s.severity, s.description);
      } else if (auto it = run_level.find(s.name); it == run_level.end() || s.value > it->second) {
        run_level[s.name] = s.value;
        w.setStat(s);
      }
    }
    for (const auto& [rank, c] : clock_of) {
      if (!c.have_start) continue;
      w.setStat(stats::kClockAppliedOffsetNs.row(rank, c.base));
      w.setStat(stats::kClockAppliedDriftPpb.row(rank, int64_t(std::llround(c.drift * 1e9))));
    }
    ++result.inputs;
  };
  for (const auto& path : inputs) {
    try {
      mergeOne(path);
    } catch (const TraceRowError& e) {
      // A row the store refuses came from this input.
      throw TraceError(fmt::format("{}: {}", path, e.what()));
    }
  }
  w.setStat(stats::kMergeInputs.row(result.inputs));
  w.flush();
  result.run = w.runId();
  result.ranks = static_cast<int>(owner.size());
  return result;
}

}  // namespace tandem::traces
