// Where the GPU and its streams wait.
//
// Idle gaps: the gaps in the union of a rank's GPU work (compute,
// communication, copies; not host calls or synchronization), each charged
// to the pair of activities around it: the one that ended last before the
// gap and the one that starts it.
// Stream waits: the gaps between one stream's own pieces of GPU work inside
// one step, charged to the work around them on that stream, and how much of
// each the rank's other streams filled.
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
#include <unordered_map>

#include "traces/analysis/parts.h"

namespace tandem::traces::detail {

namespace {

// A kernel's name as CUPTI records it can run to hundreds of characters.
std::string shortName(const std::string& s) { return s.size() > 40 ? s.substr(0, 37) + "..." : s; }

// Integer labels of activities: 0 .. ops-1 the plan's ops, ops + name id
// the activity names. A plan's task ids are dense from 0, so a rank's ops
// are looked up in a vector (one per activity: the lookups are the
// analyses' main cost on a 10M-activity run); ids far beyond the plan's
// size go through a map.
class WorkLabels {
 public:
  WorkLabels(const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan) : strings_(strings) {
    std::unordered_map<int, int64_t> tasks_of_rank;
    for (const auto& t : plan) ++tasks_of_rank[t.rank];
    for (const auto& t : plan) {
      if (t.op.empty()) continue;
      auto [it, fresh] = op_id_.emplace(t.op, int32_t(ops_.size()));
      if (fresh) ops_.push_back(t.op);
      if (t.task_id >= 0 && t.task_id < 4 * tasks_of_rank[t.rank] + 1024) {
        std::vector<int32_t>& dense = dense_[t.rank];
        if (dense.size() <= size_t(t.task_id)) dense.resize(size_t(t.task_id) + 1, -1);
        dense[size_t(t.task_id)] = it->second;
      } else {
        sparse_.emplace((int64_t(t.rank) << 40) | t.task_id, it->second);
      }
    }
  }
  // The rank's dense table (or null), for of() in a loop over its tracks.
  const std::vector<int32_t>* denseOf(int rank) const {
    auto it = dense_.find(rank);
    return it != dense_.end() ? &it->second : nullptr;
  }
  int32_t of(int rank, const std::vector<int32_t>* dense, const Track& t, size_t i) const {
    const int64_t task = t.task_id[i];
    if (task >= 0 && (t.kind[i] == ActivityKind::Kernel || t.kind[i] == ActivityKind::Collective)) {
      if (dense != nullptr && task < int64_t(dense->size()) && (*dense)[size_t(task)] >= 0)
        return (*dense)[size_t(task)];
      if (!sparse_.empty()) {
        auto it = sparse_.find((int64_t(rank) << 40) | task);
        if (it != sparse_.end()) return it->second;
      }
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
  std::unordered_map<int, std::vector<int32_t>> dense_;  // rank -> op label by task id (-1: none)
  std::unordered_map<int64_t, int32_t> sparse_;          // (rank << 40 | task) -> op label
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
  bool contains(int64_t t) const { return indexOf(t) >= 0; }
  // The window (in start order) holding t: 0 when the rank recorded none,
  // -1 when t is outside every window.
  int64_t indexOf(int64_t t) const {
    if (windows_.empty()) return 0;
    auto it = std::upper_bound(windows_.begin(), windows_.end(), std::make_pair(t, INT64_MAX));
    if (it == windows_.begin() || t >= std::prev(it)->second) return -1;
    return std::prev(it) - windows_.begin();
  }
  // The end of window `index` (from indexOf; INT64_MAX when the rank
  // recorded none).
  int64_t endOf(int64_t index) const { return windows_.empty() ? INT64_MAX : windows_[size_t(index)].second; }

 private:
  std::vector<std::pair<int64_t, int64_t>> windows_;
};

bool isGpuWork(const CategoryTable& categories, const Track& t, size_t i) {
  const Category c = categories.of(t.kind[i], t.name[i]);
  return c != Category::Host && c != Category::Sync;
}

struct Sum {
  int64_t count = 0, total_ns = 0, filled_ns = 0;
  void add(const Sum& o) {
    count += o.count;
    total_ns += o.total_ns;
    filled_ns += o.filled_ns;
  }
};

// A rank's GPU work in start order across its tracks: each track is already
// in start order, so they are merged through a heap of one cursor each.
class WorkInStartOrder {
 public:
  WorkInStartOrder(const RankTracks& rank, const CategoryTable& categories)
      : rank_(rank), categories_(categories), next_(rank.tracks.size(), 0) {
    for (size_t k = 0; k < rank.tracks.size(); ++k) advance(k);
  }
  // The next piece of work (track, index); false when there is none.
  bool next(const Track*& track, size_t& index) {
    if (heap_.empty()) return false;
    const size_t k = heap_.top().second;
    heap_.pop();
    track = rank_.tracks[k];
    index = next_[k]++;
    advance(k);
    return true;
  }

 private:
  void advance(size_t k) {  // to the track's next piece of GPU work
    const Track* t = rank_.tracks[k];
    while (next_[k] < t->size() && !isGpuWork(categories_, *t, next_[k])) ++next_[k];
    if (next_[k] < t->size()) heap_.emplace(t->start_ns[next_[k]], k);
  }
  using Cursor = std::pair<int64_t, size_t>;  // (start, track index)
  const RankTracks& rank_;
  const CategoryTable& categories_;
  std::vector<size_t> next_;
  std::priority_queue<Cursor, std::vector<Cursor>, std::greater<Cursor>> heap_;
};

// The union of a rank's GPU work as disjoint spans in time order.
std::vector<std::pair<int64_t, int64_t>> workSpans(const RankTracks& rank, const CategoryTable& categories) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  WorkInStartOrder work(rank, categories);
  const Track* t = nullptr;
  size_t i = 0;
  while (work.next(t, i)) {
    if (t->end_ns[i] <= t->start_ns[i]) continue;
    if (!spans.empty() && t->start_ns[i] <= spans.back().second)
      spans.back().second = std::max(spans.back().second, t->end_ns[i]);
    else
      spans.emplace_back(t->start_ns[i], t->end_ns[i]);
  }
  return spans;
}

}  // namespace

IdleGaps idleGaps(const std::vector<RankTracks>& ranks, const CategoryTable& categories,
                  const std::vector<std::string>& strings, const std::vector<PlanTaskRow>& plan,
                  const std::vector<StepRow>& steps, size_t max_pairs) {
  const WorkLabels labels(strings, plan);
  IdleGaps out;
  std::map<std::pair<int32_t, int32_t>, Sum> pairs;
  for (const RankTracks& rank : ranks) {
    const StepWindows windows(steps, rank.rank);
    const std::vector<int32_t>* dense = labels.denseOf(rank.rank);
    out.steps += windows.count();
    WorkInStartOrder work(rank, categories);
    bool any = false;
    int64_t last_end = 0;
    int32_t last_label = 0;
    const Track* t = nullptr;
    size_t i = 0;
    while (work.next(t, i)) {
      const int32_t label = labels.of(rank.rank, dense, *t, i);
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
  // Per stream, (before, after) packed into one key: a wait follows nearly
  // every kernel of a busy stream, so this map is hit once per activity.
  auto key = [](int32_t before, int32_t after) { return (uint64_t(uint32_t(before)) << 32) | uint32_t(after); };
  std::map<int, std::unordered_map<uint64_t, Sum>> pairs;  // stream -> pair -> sums
  std::map<int, Sum> per_stream;
  // Per stream, its waits in each (rank, step) window of the ranks that have
  // it (zero where it did not wait), for the medians over steps.
  std::map<int, std::vector<int64_t>> window_total, window_filled;
  for (const RankTracks& rank : ranks) {
    const StepWindows windows(steps, rank.rank);
    const std::vector<int32_t>* dense = labels.denseOf(rank.rank);
    out.steps += windows.count();
    const size_t window_count = size_t(std::max<int64_t>(1, windows.count()));
    // A stream has no work inside its own wait, so the rank's union there
    // is the other streams' work.
    const std::vector<std::pair<int64_t, int64_t>> spans = workSpans(rank, categories);
    for (const Track* t : rank.tracks) {
      Sum stream_sum;
      std::vector<int64_t> in_window(window_count, 0), filled_in_window(window_count, 0);
      std::unordered_map<uint64_t, Sum>& stream_pairs = pairs[t->stream];
      uint64_t last_key = ~uint64_t(0);
      Sum* last_sum = nullptr;  // stays valid: the map's elements never move
      size_t cursor = 0;  // the first busy span that ends after the current wait starts
      bool any = false;
      int64_t last_end = 0;
      int32_t last_label = 0;
      for (size_t i = 0; i < t->size(); ++i) {
        if (!isGpuWork(categories, *t, i)) continue;
        const int32_t label = labels.of(rank.rank, dense, *t, i);
        // A wait lies inside one step: the stream's idle time from its last
        // work of one step to its first of the next (a stream that runs in
        // the backward only, a memset the graph puts on a stream of its own
        // once per step) is not a wait inside the steps.
        int64_t window = any && t->start_ns[i] > last_end ? windows.indexOf(last_end) : -1;
        if (window >= 0 && t->start_ns[i] >= windows.endOf(window)) window = -1;
        if (window >= 0) {
          const int64_t from = last_end, to = t->start_ns[i];
          // The waits of a track come in time order: the cursor only advances.
          while (cursor < spans.size() && spans[cursor].second <= from) ++cursor;
          int64_t filled = 0;
          for (size_t c = cursor; c < spans.size() && spans[c].first < to; ++c)
            filled += std::min(to, spans[c].second) - std::max(from, spans[c].first);
          const uint64_t k = key(last_label, label);
          if (k != last_key) last_key = k, last_sum = &stream_pairs[k];
          for (Sum* s : {last_sum, &stream_sum}) {
            ++s->count;
            s->total_ns += to - from;
            s->filled_ns += filled;
          }
          in_window[size_t(window)] += to - from;
          filled_in_window[size_t(window)] += filled;
        }
        if (!any || t->end_ns[i] > last_end) last_end = t->end_ns[i], last_label = label;
        any = true;
      }
      auto& totals = window_total[t->stream];
      totals.insert(totals.end(), in_window.begin(), in_window.end());
      auto& filled = window_filled[t->stream];
      filled.insert(filled.end(), filled_in_window.begin(), filled_in_window.end());
      if (stream_sum.count == 0) continue;
      per_stream[t->stream].add(stream_sum);
      out.waits += stream_sum.count;
      out.total_ns += stream_sum.total_ns;
      out.filled_ns += stream_sum.filled_ns;
    }
  }
  auto nameOf = [&](int stream) {
    auto it = stream_names.find(stream);
    return it != stream_names.end() ? it->second : std::string();
  };
  for (const auto& [stream, s] : per_stream)
    out.streams.push_back({stream, nameOf(stream), s.count, s.total_ns, s.filled_ns,
                           distributionOf(window_total[stream]).p50, distributionOf(window_filled[stream]).p50});
  std::sort(out.streams.begin(), out.streams.end(), [](const StreamWaitTotal& a, const StreamWaitTotal& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.stream < b.stream;
  });
  for (const auto& [stream, stream_pairs] : pairs)
    for (const auto& [k, s] : stream_pairs) {
      const int32_t before = int32_t(k >> 32), after = int32_t(k & 0xFFFFFFFFu);
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
