#include "traces/analysis/interval_set.h"

#include <algorithm>

namespace tandem::traces {

IntervalSet::IntervalSet(std::vector<Interval> disjoint) : intervals_(std::move(disjoint)) {
  prefix_.reserve(intervals_.size() + 1);
  prefix_.push_back(0);
  for (const auto& [s, e] : intervals_) {
    length_ += e - s;
    prefix_.push_back(length_);
  }
}

IntervalSet IntervalSet::fromUnsorted(std::vector<Interval> in) {
  std::erase_if(in, [](const Interval& i) { return i.second <= i.first; });
  std::sort(in.begin(), in.end());
  std::vector<Interval> out;
  out.reserve(in.size());
  for (const auto& i : in) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return IntervalSet(std::move(out));
}

IntervalSet IntervalSet::unite(const IntervalSet& other) const {
  std::vector<Interval> merged;
  merged.reserve(intervals_.size() + other.intervals_.size());
  std::merge(intervals_.begin(), intervals_.end(), other.intervals_.begin(), other.intervals_.end(),
             std::back_inserter(merged));
  std::vector<Interval> out;
  out.reserve(merged.size());
  for (const auto& i : merged) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return IntervalSet(std::move(out));
}

IntervalSet IntervalSet::intersect(const IntervalSet& other) const {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  const auto& a = intervals_;
  const auto& b = other.intervals_;
  while (i < a.size() && j < b.size()) {
    int64_t s = std::max(a[i].first, b[j].first);
    int64_t e = std::min(a[i].second, b[j].second);
    if (s < e) out.emplace_back(s, e);
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return IntervalSet(std::move(out));
}

IntervalSet IntervalSet::subtract(const IntervalSet& other) const {
  std::vector<Interval> out;
  const auto& b = other.intervals_;
  size_t j = 0;
  for (auto [s, e] : intervals_) {
    while (j < b.size() && b[j].second <= s) ++j;
    size_t k = j;
    int64_t cur = s;
    while (k < b.size() && b[k].first < e) {
      if (b[k].first > cur) out.emplace_back(cur, b[k].first);
      cur = std::max(cur, b[k].second);
      if (b[k].second >= e) break;
      ++k;
    }
    if (cur < e) out.emplace_back(cur, e);
  }
  return IntervalSet(std::move(out));
}

int64_t IntervalSet::lengthBefore(int64_t t) const {
  // First interval that starts at or after t: everything before it counts,
  // minus the part of the previous interval that reaches past t.
  auto it = std::lower_bound(intervals_.begin(), intervals_.end(), t,
                             [](const Interval& i, int64_t v) { return i.first < v; });
  size_t idx = static_cast<size_t>(it - intervals_.begin());
  int64_t len = prefix_[idx];
  if (idx > 0 && intervals_[idx - 1].second > t) len -= intervals_[idx - 1].second - t;
  return len;
}

int64_t IntervalSet::lengthIn(int64_t t0, int64_t t1) const {
  if (t1 <= t0) return 0;
  return lengthBefore(t1) - lengthBefore(t0);
}

}  // namespace tandem::traces
