#include "gui/slice_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "gui/timeline_math.h"
#include "gui/timeline_palette.h"
#include "traces/analysis/kernel_names.h"

namespace tandem::gui {

std::string phaseName(uint8_t phase) {
  if (phase > uint8_t(kLastPhase)) return "";
  return std::string(toString(Phase(phase)));
}

namespace {

std::string number(double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string bytesText(double b) {
  if (b >= 1e9) return number(b / 1e9, "%.2f GB");
  if (b >= 1e6) return number(b / 1e6, "%.2f MB");
  if (b >= 1e3) return number(b / 1e3, "%.1f kB");
  return number(b, "%.0f B");
}

// Whether slice i of t continues the execution of the slice before it: a
// profiled task may run several kernels in a row on its stream (Llama's
// attention: angles, rotation, the attention kernel), a simulated one a
// main and a trailing record, and each carries the task's plan facts. The
// slice before it must be the same task's in the same step (a track holding
// one task only, a bucket's all-reduce say, has a slice per step).
bool continuesExecution(const TimelineData& data, const Track& t, size_t i) {
  if (i == 0 || t.task_id[i] < 0 || t.task_id[i - 1] != t.task_id[i]) return false;
  const int step = data.stepAt(t.start_ns[i]);
  return step >= 0 && step == data.stepAt(t.start_ns[i - 1]);
}

struct Acc {
  std::string key;
  std::string category;
  std::vector<int64_t> durations;
  int64_t total = 0;
  double flops = 0;
  int64_t bytes = 0;
};

}  // namespace

std::vector<traces::KernelStat> sliceStats(const TimelineData& data, StatsGroup group, int64_t t0_ns,
                                           int64_t t1_ns) {
  std::unordered_map<std::string, size_t> index;
  std::vector<Acc> accs;
  // Per (track kind, name id) the group slot, so the string key is built
  // once per distinct name rather than once per slice.
  std::vector<std::vector<int32_t>> slot_of(size_t(kLastStreamKind) + 2);  // per track kind, then host calls
  for (const Track& t : data.tracks) {
    const size_t first = firstIndex(t.max_end_ns, t0_ns);
    const size_t last = lastIndex(t.start_ns, t1_ns);
    auto& slot_table = slot_of[size_t(t.kind)];
    for (size_t i = first; i < last; ++i) {
      if (t.end_ns[i] <= t0_ns) continue;  // nested slices before the window
      const TaskFacts* facts = data.factsFor(t.rank, t.task_id[i]);
      // A small integer per group value, so the string key is built once per
      // distinct value rather than once per slice.
      int32_t code = 0;
      switch (group) {
        case StatsGroup::Name: code = t.name_id[i]; break;
        case StatsGroup::Op: code = facts ? int32_t(facts->op) : 1000 + t.task_kind[i]; break;
        case StatsGroup::Phase: code = t.phase[i]; break;
      }
      // Host calls and waits (synchronization records) group apart (below).
      auto& group_slots = t.task_kind[i] == uint8_t(TaskKind::Host) ? slot_of.back() : slot_table;
      int32_t slot = size_t(code) < group_slots.size() ? group_slots[size_t(code)] : -1;
      if (slot < 0) {
        std::string key;
        switch (group) {
          case StatsGroup::Name: key = data.names[size_t(t.name_id[i])]; break;
          case StatsGroup::Op:
            key = facts ? std::string(toString(facts->op)) : std::string(toString(TaskKind(t.task_kind[i])));
            break;
          case StatsGroup::Phase: key = phaseName(t.phase[i]); break;
        }
        if (key.empty()) key = "(none)";
        // Host calls and waits (synchronization records) are no GPU work:
        // their own category, listed after the GPU's rows.
        const bool host = t.task_kind[i] == uint8_t(TaskKind::Host);
        const std::string category = host ? std::string("host") : std::string(toString(t.kind));
        const std::string full = category + "\x1f" + key;
        auto [it, fresh] = index.try_emplace(full, accs.size());
        if (fresh) accs.push_back({key, category, {}, 0, 0, 0});
        slot = int32_t(it->second);
        if (group_slots.size() <= size_t(code)) group_slots.resize(size_t(code) + 1, -1);
        group_slots[size_t(code)] = slot;
      }
      Acc& a = accs[size_t(slot)];
      const int64_t d = t.end_ns[i] - t.start_ns[i];
      a.durations.push_back(d);
      a.total += d;
      // A task's work counts once per execution (continuesExecution).
      if (facts && !continuesExecution(data, t, i)) {
        a.flops += facts->flops;
        a.bytes += facts->bytes;
      }
    }
  }
  std::vector<traces::KernelStat> out;
  out.reserve(accs.size());
  for (Acc& a : accs) {
    traces::KernelStat s;
    s.key = a.key;
    s.category = a.category;
    s.count = int64_t(a.durations.size());
    s.total_ns = a.total;
    s.mean_ns = s.count ? double(a.total) / double(s.count) : 0;
    auto nth = [&](double p) {
      size_t k = size_t(std::ceil(p / 100.0 * double(a.durations.size())));
      k = std::clamp<size_t>(k, 1, a.durations.size()) - 1;
      std::nth_element(a.durations.begin(), a.durations.begin() + long(k), a.durations.end());
      return a.durations[k];
    };
    if (s.count) {
      s.p50_ns = nth(50);
      s.p95_ns = nth(95);
    }
    s.flops = a.flops;
    s.bytes = a.bytes;
    // FLOP per ns / 1e3 = TFLOP/s; bytes per ns = GB/s.
    if (a.total > 0 && a.flops > 0) s.tflops = a.flops / double(a.total) / 1e3;
    if (a.total > 0 && a.bytes > 0) s.gbps = double(a.bytes) / double(a.total);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    const bool hx = x.category == "host", hy = y.category == "host";
    if (hx != hy) return hy;  // GPU work first
    return x.total_ns != y.total_ns ? x.total_ns > y.total_ns : x.key < y.key;
  });
  return out;
}

namespace {

const std::string& taskNameOf(const TimelineData& d, const Track& t, size_t i) {
  return d.names[size_t(d.taskNameId(t, i))];
}

}  // namespace

int64_t counterpartOf(const TimelineData& data, int track, int64_t index, const TimelineData& other,
                      int& other_track) {
  other_track = -1;
  const Track& t = data.tracks[size_t(track)];
  const int32_t task = t.task_id[size_t(index)];
  const std::string& name = taskNameOf(data, t, size_t(index));
  // Plan task ids are the join key between a real run and its simulation;
  // two different plans (another recompute policy) number their tasks
  // differently, so the name must agree too, and the name alone decides when
  // the ids do not line up. The same occurrence of the task (its kernel in
  // the same step), or its last one when the other run has fewer (one
  // simulated step against many profiled ones).
  for (int pass = 0; pass < 2; ++pass) {
    const bool by_id = pass == 0;
    if (by_id && task < 0) continue;
    int occurrence = 0;
    for (int64_t i = 0; i < index; ++i)
      occurrence += (!by_id || t.task_id[size_t(i)] == task) && taskNameOf(data, t, size_t(i)) == name;
    int64_t last = -1;
    for (size_t k = 0; k < other.tracks.size(); ++k) {
      const Track& o = other.tracks[k];
      if (o.rank != t.rank || o.kind != t.kind) continue;
      int seen = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        if (by_id && o.task_id[i] != task) continue;
        if (taskNameOf(other, o, i) != name) continue;
        other_track = int(k);
        last = int64_t(i);
        if (seen++ == occurrence) return last;
      }
      if (last >= 0) return last;
    }
  }
  other_track = -1;
  return -1;
}

std::vector<std::pair<std::string, std::string>> sliceDetails(const TimelineData& data, int track,
                                                              int64_t index, const TimelineData* compare) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (track < 0 || size_t(track) >= data.tracks.size()) return rows;
  const Track& t = data.tracks[size_t(track)];
  if (index < 0 || size_t(index) >= t.size()) return rows;
  const size_t i = size_t(index);
  const int64_t dur = t.end_ns[i] - t.start_ns[i];
  const TaskFacts* facts = data.factsFor(t.rank, t.task_id[i]);
  rows.push_back({"name", data.names[size_t(t.name_id[i])]});
  if (size_t(t.name_id[i]) < data.symbols.size() && data.symbols[size_t(t.name_id[i])] != data.names[size_t(t.name_id[i])])
    rows.push_back({"symbol", traces::demangledName(data.symbols[size_t(t.name_id[i])])});
  rows.push_back({"op", facts ? std::string(toString(facts->op)) : std::string(toString(TaskKind(t.task_kind[i])))});
  rows.push_back({"rank / stream", std::to_string(t.rank) + " / " + t.label});
  rows.push_back({"layer", t.layer[i] >= 0 ? std::to_string(t.layer[i]) : "-"});
  rows.push_back({"phase", phaseName(t.phase[i]).empty() ? "-" : phaseName(t.phase[i])});
  rows.push_back({"micro-batch", t.micro_batch[i] >= 0 ? std::to_string(t.micro_batch[i]) : "-"});
  const int step = data.stepAt(t.start_ns[i]);
  rows.push_back({"step", step >= 0 ? std::to_string(data.steps[size_t(step)].step) : "-"});
  rows.push_back({"start", formatDuration(t.start_ns[i] - data.begin_ns)});
  rows.push_back({"duration", formatDuration(dur)});
  // The plan's work is the whole execution's: with several kernels in a row
  // (continuesExecution) the rates are over all of them.
  size_t first = i, last = i;
  while (continuesExecution(data, t, first)) --first;
  while (last + 1 < t.size() && continuesExecution(data, t, last + 1)) ++last;
  int64_t busy = 0;
  for (size_t k = first; k <= last; ++k) busy += t.end_ns[k] - t.start_ns[k];
  if (last > first)
    rows.push_back({"task's kernels", std::to_string(last - first + 1) + " in a row, " + formatDuration(busy)});
  if (facts && facts->flops > 0) {
    rows.push_back({"FLOPs", number(facts->flops / 1e9, "%.2f GFLOP")});
    if (busy > 0) rows.push_back({"achieved", number(facts->flops / double(busy) / 1e3, "%.1f TFLOP/s")});
  }
  if (facts && facts->bytes > 0) {
    rows.push_back({"bytes", bytesText(double(facts->bytes))});
    if (busy > 0 && (!facts || facts->flops <= 0))
      rows.push_back({"achieved", number(double(facts->bytes) / double(busy), "%.1f GB/s")});
  }
  rows.push_back({"plan task", t.task_id[i] >= 0 ? std::to_string(t.task_id[i]) : "-"});
  if (compare) {
    int other_track = -1;
    const int64_t j = counterpartOf(data, track, index, *compare, other_track);
    if (j < 0) {
      rows.push_back({"compared run", "no slice with this task"});
    } else {
      const Track& o = compare->tracks[size_t(other_track)];
      const int64_t odur = o.end_ns[size_t(j)] - o.start_ns[size_t(j)];
      rows.push_back(
          {"compared run", formatDuration(odur) + " (" + compare->names[size_t(o.name_id[size_t(j)])] + ")"});
      const double pct = odur > 0 ? 100.0 * double(dur - odur) / double(odur) : 0.0;
      rows.push_back({"difference", (dur >= odur ? "+" : "-") + formatDuration(std::llabs(dur - odur)) +
                                        number(pct, " (%+.1f%%)")});
    }
  }
  return rows;
}

}  // namespace tandem::gui
