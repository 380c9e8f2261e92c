// Temporal breakdown, overlap and idle time (HTA definitions, see analysis.h).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "traces/analysis/parts.h"

namespace tandem::traces {

CategoryTable::CategoryTable(const Classifier& classifier, const std::vector<std::string>& strings)
    : table_(std::max<size_t>(strings.size(), 1) * kKinds) {
  for (size_t n = 0; n < strings.size(); ++n)
    for (size_t k = 0; k < kKinds; ++k)
      table_[n * kKinds + k] = classifier.classify(static_cast<ActivityKind>(k), strings[n]);
}

RankSets buildRankSets(const std::vector<const Track*>& tracks, const CategoryTable& categories) {
  std::vector<IntervalSet::Interval> by_cat[kCategoryCount];
  std::vector<IntervalSet::Interval> recompute, p2p, other_comm;
  for (const Track* t : tracks) {
    for (size_t i = 0; i < t->size(); ++i) {
      Category c = categories.of(t->kind[i], t->name[i]);
      if (c == Category::Host) continue;
      IntervalSet::Interval iv{t->start_ns[i], t->end_ns[i]};
      by_cat[static_cast<size_t>(c)].push_back(iv);
      if (c == Category::Comm)
        (t->kind[i] == ActivityKind::Send || t->kind[i] == ActivityKind::Recv ? p2p : other_comm).push_back(iv);
      if (t->phase[i] == Phase::Recompute) recompute.push_back(iv);
    }
  }
  RankSets s;
  s.compute = IntervalSet::fromUnsorted(std::move(by_cat[static_cast<size_t>(Category::Compute)]));
  s.comm = IntervalSet::fromUnsorted(std::move(by_cat[static_cast<size_t>(Category::Comm)]));
  s.memcpy = IntervalSet::fromUnsorted(std::move(by_cat[static_cast<size_t>(Category::Memcpy)]));
  s.sync = IntervalSet::fromUnsorted(std::move(by_cat[static_cast<size_t>(Category::Sync)]));
  s.recompute = IntervalSet::fromUnsorted(std::move(recompute));
  IntervalSet compute_or_comm = s.compute.unite(s.comm);
  IntervalSet with_memcpy = compute_or_comm.unite(s.memcpy);
  s.all = with_memcpy.unite(s.sync);
  s.overlap = s.compute.intersect(s.comm);
  s.exposed_comm = s.comm.subtract(s.compute);
  s.p2p = IntervalSet::fromUnsorted(std::move(p2p));
  // Only the transfers: a receive posted early spins beside the other
  // collectives' exposed time, which is not the pipeline's.
  s.exposed_p2p = s.p2p.subtract(s.compute.unite(IntervalSet::fromUnsorted(std::move(other_comm))));
  s.memcpy_exclusive = s.memcpy.subtract(compute_or_comm);
  s.sync_exclusive = s.sync.subtract(with_memcpy);
  return s;
}

Breakdown breakdownOf(const RankSets& s, int64_t t0, int64_t t1) {
  Breakdown b;
  b.span_ns = std::max<int64_t>(0, t1 - t0);
  b.busy_ns = s.all.lengthIn(t0, t1);
  b.idle_ns = b.span_ns - b.busy_ns;
  b.compute_ns = s.compute.lengthIn(t0, t1);
  b.comm_ns = s.comm.lengthIn(t0, t1);
  b.memcpy_ns = s.memcpy.lengthIn(t0, t1);
  b.sync_ns = s.sync.lengthIn(t0, t1);
  b.overlap_ns = s.overlap.lengthIn(t0, t1);
  b.exposed_comm_ns = s.exposed_comm.lengthIn(t0, t1);
  b.p2p_ns = s.p2p.lengthIn(t0, t1);
  b.exposed_p2p_ns = s.exposed_p2p.lengthIn(t0, t1);
  b.memcpy_exclusive_ns = s.memcpy_exclusive.lengthIn(t0, t1);
  b.sync_exclusive_ns = s.sync_exclusive.lengthIn(t0, t1);
  b.recompute_ns = s.recompute.lengthIn(t0, t1);
  b.overlap_pct = b.comm_ns > 0 ? 100.0 * static_cast<double>(b.overlap_ns) / static_cast<double>(b.comm_ns) : 0.0;
  b.recompute_share_pct =
      b.span_ns > 0 ? 100.0 * static_cast<double>(b.recompute_ns) / static_cast<double>(b.span_ns) : 0.0;
  return b;
}

Distribution distributionOf(std::vector<int64_t> v) {
  Distribution d;
  d.count = static_cast<int64_t>(v.size());
  if (v.empty()) return d;
  // Selection instead of a full sort: linear time on million-entry groups.
  auto rank = [&](double p) {
    auto idx = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    auto nth = v.begin() + static_cast<std::ptrdiff_t>(std::clamp<size_t>(idx, 1, v.size()) - 1);
    std::nth_element(v.begin(), nth, v.end());
    return *nth;
  };
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  d.min = *mn;
  d.max = *mx;
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  d.mean = sum / static_cast<double>(v.size());
  d.p95 = rank(95);
  d.p50 = rank(50);
  return d;
}

namespace detail {

IdleBreakdown idleBreakdownOf(const RankTracks& rank, const CategoryTable& categories, int64_t threshold_ns) {
  // Launch records are host activities carrying the correlation id of the
  // GPU work they enqueued (cudaLaunchKernel and friends).
  std::unordered_map<int64_t, int64_t> launch_start;
  for (const Track* t : rank.tracks)
    for (size_t i = 0; i < t->size(); ++i)
      if (t->correlation_id[i] >= 0 && categories.of(t->kind[i], t->name[i]) == Category::Host)
        launch_start.emplace(t->correlation_id[i], t->start_ns[i]);
  IdleBreakdown idle;
  idle.has_launch_records = !launch_start.empty();
  for (const Track* t : rank.tracks) {
    bool have_prev = false;
    int64_t prev_end = 0;
    for (size_t i = 0; i < t->size(); ++i) {
      if (categories.of(t->kind[i], t->name[i]) == Category::Host) continue;
      if (have_prev && t->start_ns[i] > prev_end) {
        int64_t gap = t->start_ns[i] - prev_end;
        ++idle.gaps;
        auto it = t->correlation_id[i] >= 0 ? launch_start.find(t->correlation_id[i]) : launch_start.end();
        if (gap < threshold_ns)
          idle.kernel_wait_ns += gap;
        else if (it != launch_start.end() && it->second >= prev_end)
          idle.host_wait_ns += gap;
        else
          idle.other_ns += gap;
      }
      prev_end = have_prev ? std::max(prev_end, t->end_ns[i]) : t->end_ns[i];
      have_prev = true;
    }
  }
  return idle;
}

}  // namespace detail
}  // namespace tandem::traces
