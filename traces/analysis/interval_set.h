#pragma once
// Sorted, disjoint half-open intervals [start, end) in nanoseconds: the
// arithmetic behind every "union of compute" and "comm not hidden by compute"
// figure. Building from raw intervals merges overlaps, so activities running
// on several streams at once are counted once (HTA's definitions).

#include <cstdint>
#include <utility>
#include <vector>

namespace tandem::traces {

class IntervalSet {
 public:
  using Interval = std::pair<int64_t, int64_t>;

  IntervalSet() = default;
  // Merges arbitrary intervals (any order, overlapping, empty ones dropped).
  static IntervalSet fromUnsorted(std::vector<Interval> intervals);

  IntervalSet unite(const IntervalSet& other) const;
  IntervalSet intersect(const IntervalSet& other) const;
  IntervalSet subtract(const IntervalSet& other) const;

  int64_t length() const { return length_; }
  // Covered length inside [t0, t1).
  int64_t lengthIn(int64_t t0, int64_t t1) const;
  const std::vector<Interval>& intervals() const { return intervals_; }
  bool empty() const { return intervals_.empty(); }

 private:
  explicit IntervalSet(std::vector<Interval> disjoint);
  // Covered length in (-inf, t).
  int64_t lengthBefore(int64_t t) const;

  std::vector<Interval> intervals_;
  std::vector<int64_t> prefix_;  // prefix_[i] = covered length of intervals_[0, i)
  int64_t length_ = 0;
};

}  // namespace tandem::traces
