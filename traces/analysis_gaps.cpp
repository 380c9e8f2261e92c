// Where the GPU and its streams wait.
//
// Idle gaps: the gaps in the union of a rank's GPU work (compute,
// communication, copies; not host calls or synchronization), each charged
// to the pair of activities around it: the one that ended last before the
// gap and the one that starts it.
// Stream waits: the gaps between one stream's own pieces of GPU work,
// charged to the work around them on that stream, and how much of each the
// rank's other streams filled.
// Kernels and collectives of plan tasks go by their op ("add -> matmul");
// other work by its name. Inside recorded steps only, where a rank has
// them: the set-up before the first step (GEMM algorithm timing, the first
// copies) is not the steps' idle time.
//
// Each track is already in start order, so a rank's activities are merged
// across its tracks (a heap of one cursor per track), not sorted, and
// labels stay small integers until the report names the largest pairs: the
// report's 10M-activity budget (docs/benchmarks.md) has no room for a
// string per activity.
#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "traces/analysis_parts.h"

namespace tandem::traces::detail {

namespace {

// A kernel's name as CUPTI records it can run to hundreds of characters.
std::string shortName(const std::string& s) { return s.size() > 40 ? s.substr(0, 37) + "..." : s; }

// Integer labels of activities: 0 .. ops-1 the plan's ops, ops + name id
// the activity names.
class WorkLabels {
 public:
  WorkLabels(const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan) : strings_(strings) {
    for (const auto& t : plan) {
      if (t.op.empty()) continue;
      auto [it, fresh] = op_id_.emplace(t.op, int32_t(ops_.size()));
      if (fresh) ops_.push_back(t.op);
      op_of_task_.emplace((int64_t(t.rank) << 40) | t.task_id, it->second);
    }
  }
  int32_t of(int rank, const Track& t, size_t i) const {
    if (t.task_id[i] >= 0 && (t.kind[i] == ActivityKind::Kernel || t.kind[i] == ActivityKind::Collective)) {
      auto it = op_of_task_.find((int64_t(rank) << 40) | t.task_id[i]);
      if (it != op_of_task_.end()) return it->second;
    }
    return int32_t(ops_.size()) + t.name[i];
  }
  std::string text(int32_t label) const {
    const int32_t base = int32_t(ops_.size());
    return label < base ? ops_[size_t(label)] : shortName(strings_[size_t(label - base)]);
  }

 private:
  const std::vector<std::string>& strings_;
  std::vector<std::string> ops_;
  std::unordered_map<std::string, int32_t> op_id_;
  std::unordered_map<int64_t, int32_t> op_of_task_;  // (rank << 40 | task) -> op label
};

// A rank's recorded step windows: whether a time falls inside one (always,
// when the rank recorded none).
class StepWindows {
 public:
  StepWindows(const std::vector<StepRow>& steps, int rank) {
    for (const StepRow& s : steps)
      if (s.rank == rank) windows_.emplace_back(s.start_ns, s.end_ns);
    std::sort(windows_.begin(), windows_.end());
  }
  int64_t count() const { return static_cast<int64_t>(windows_.size()); }
  bool contains(int64_t t) const {
    if (windows_.empty()) return true;
    auto it = std::upper_bound(windows_.begin(), windows_.end(), std::make_pair(t, INT64_MAX));
    return it != windows_.begin() && t < std::prev(it)->second;
  }

 private:
  std::vector<std::pair<int64_t, int64_t>> windows_;
};

bool isGpuWork(const CategoryTable& categories, const Track& t, size_t i) {
  const Category c = categories.of(t.kind[i], t.name[i]);
  return c != Category::Host && c != Category::Sync;
}

struct Sum {
  int64_t count = 0, total_ns = 0, filled_ns = 0;
};

}  // namespace

IdleGaps idleGaps(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                  const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                  const std::vector<StepRow>& steps, size_t max_pairs) {
  const WorkLabels labels(strings, plan);
  IdleGaps out;
  std::map<std::pair<int32_t, int32_t>, Sum> pairs;
  for (const RankTracks& rank : ranks) {
    const StepWindows windows(steps, rank.rank);
    out.steps += windows.count();
    // One cursor per track, the earliest start first.
    using Cursor = std::pair<int64_t, size_t>;  // (start, track index)
    std::priority_queue<Cursor, std::vector<Cursor>, std::greater<Cursor>> heap;
    std::vector<size_t> next(rank.tracks.size(), 0);
    auto advance = [&](size_t k) {  // to the track's next piece of GPU work
      const Track* t = rank.tracks[k];
      while (next[k] < t->size() && !isGpuWork(categories, *t, next[k])) ++next[k];
      if (next[k] < t->size()) heap.emplace(t->start_ns[next[k]], k);
    };
    for (size_t k = 0; k < rank.tracks.size(); ++k) advance(k);
    bool any = false;
    int64_t last_end = 0;
    int32_t last_label = 0;
    while (!heap.empty()) {
      const size_t k = heap.top().second;
      heap.pop();
      const Track* t = rank.tracks[k];
      const size_t i = next[k]++;
      advance(k);
      const int32_t label = labels.of(rank.rank, *t, i);
      if (any && t->start_ns[i] > last_end && windows.contains(last_end)) {
        Sum& s = pairs[{last_label, label}];
        ++s.count;
        s.total_ns += t->start_ns[i] - last_end;
        ++out.gaps;
        out.total_ns += t->start_ns[i] - last_end;
      }
      if (!any || t->end_ns[i] > last_end) last_end = t->end_ns[i], last_label = label;
      any = true;
    }
  }
  for (const auto& [key, s] : pairs)
    out.pairs.push_back({labels.text(key.first), labels.text(key.second), s.count, s.total_ns});
  std::sort(out.pairs.begin(), out.pairs.end(), [](const IdleGapPair& a, const IdleGapPair& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.before != b.before ? a.before < b.before : a.after < b.after;
  });
  out.pair_kinds = static_cast<int64_t>(out.pairs.size());
  if (out.pairs.size() > max_pairs) out.pairs.resize(max_pairs);
  return out;
}

StreamWaits streamWaits(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                        const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                        const std::vector<StepRow>& steps, const std::vector<StreamRow>& streams, size_t max_pairs) {
  const WorkLabels labels(strings, plan);
  // Streams go by number across ranks (the executor and the simulator give
  // a stream the same number on every rank), named as on the lowest rank.
  std::map<int, std::string> stream_names;
  for (const StreamRow& s : streams) stream_names.emplace(s.stream, s.name);
  StreamWaits out;
  std::map<std::tuple<int, int32_t, int32_t>, Sum> pairs;
  std::map<int, Sum> per_stream;
  for (const RankTracks& rank : ranks) {
    const StepWindows windows(steps, rank.rank);
    out.steps += windows.count();
    std::vector<std::pair<int64_t, int64_t>> work;
    for (const Track* t : rank.tracks)
      for (size_t i = 0; i < t->size(); ++i)
        if (isGpuWork(categories, *t, i)) work.emplace_back(t->start_ns[i], t->end_ns[i]);
    // A stream has no work inside its own wait, so the rank's union there
    // is the other streams' work.
    const IntervalSet busy = IntervalSet::fromUnsorted(std::move(work));
    for (const Track* t : rank.tracks) {
      bool any = false;
      int64_t last_end = 0;
      int32_t last_label = 0;
      for (size_t i = 0; i < t->size(); ++i) {
        if (!isGpuWork(categories, *t, i)) continue;
        const int32_t label = labels.of(rank.rank, *t, i);
        if (any && t->start_ns[i] > last_end && windows.contains(last_end)) {
          const int64_t wait = t->start_ns[i] - last_end, filled = busy.lengthIn(last_end, t->start_ns[i]);
          for (Sum* s : {&pairs[{t->stream, last_label, label}], &per_stream[t->stream]}) {
            ++s->count;
            s->total_ns += wait;
            s->filled_ns += filled;
          }
          ++out.waits;
          out.total_ns += wait;
          out.filled_ns += filled;
        }
        if (!any || t->end_ns[i] > last_end) last_end = t->end_ns[i], last_label = label;
        any = true;
      }
    }
  }
  auto nameOf = [&](int stream) {
    auto it = stream_names.find(stream);
    return it != stream_names.end() ? it->second : std::string();
  };
  for (const auto& [stream, s] : per_stream)
    out.streams.push_back({stream, nameOf(stream), s.count, s.total_ns, s.filled_ns});
  std::sort(out.streams.begin(), out.streams.end(), [](const StreamWaitTotal& a, const StreamWaitTotal& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.stream < b.stream;
  });
  for (const auto& [key, s] : pairs) {
    const auto& [stream, before, after] = key;
    out.pairs.push_back({stream, nameOf(stream), labels.text(before), labels.text(after), s.count, s.total_ns,
                         s.filled_ns});
  }
  std::sort(out.pairs.begin(), out.pairs.end(), [](const StreamWaitPair& a, const StreamWaitPair& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    if (a.stream != b.stream) return a.stream < b.stream;
    return a.before != b.before ? a.before < b.before : a.after < b.after;
  });
  out.pair_kinds = static_cast<int64_t>(out.pairs.size());
  if (out.pairs.size() > max_pairs) out.pairs.resize(max_pairs);
  return out;
}

}  // namespace tandem::traces::detail
