#pragma once
// Pure functions behind the timeline: time <-> pixel mapping, zoom and pan,
// adaptive tick steps, visible index ranges, hit-testing, sub-pixel
// coalescing and the overlap / phase sweeps. Tested without pixels.

#include <cstdint>
#include <string>
#include <vector>

#include "gui/timeline_data.h"

namespace tandem::gui {

// A visible time window [start_ns, end_ns) drawn over width_px pixels that
// begin at x0_px (the left edge of the lane area).
struct TimeMapping {
  int64_t start_ns = 0;
  int64_t end_ns = 1;
  double x0_px = 0;
  double width_px = 1;

  double nsPerPx() const { return double(end_ns - start_ns) / width_px; }
  double toX(int64_t t_ns) const { return x0_px + double(t_ns - start_ns) / nsPerPx(); }
  int64_t toTime(double x_px) const;
};

// Smallest visible window; zooming further is refused rather than producing
// a window of zero width.
inline constexpr int64_t kMinWindowNs = 100;

// Zooms by `factor` (< 1 zooms in) keeping the time under x_px fixed.
TimeMapping zoomAt(const TimeMapping& m, double x_px, double factor);
// Shifts the window by dx_px pixels (positive moves the content right, i.e.
// shows earlier times).
TimeMapping panBy(const TimeMapping& m, double dx_px);
// Keeps the window inside [lo, hi] (with its width if possible).
TimeMapping clampTo(const TimeMapping& m, int64_t lo_ns, int64_t hi_ns);

// Tick step from the 1-2-5 series such that ticks are at least min_spacing_px
// apart. Returns >= 1.
int64_t tickStep(int64_t window_ns, double width_px, double min_spacing_px);
// "1.5 ms", "250 us", "12 ns": the unit chosen by magnitude.
std::string formatDuration(int64_t ns);

// A time axis label: `offset_ns` (a multiple of `step_ns`) in the unit its
// magnitude calls for, with the decimals the step needs, so that labels a
// step apart always differ ("3.578124 s" beside "3.578126 s" at a 2 us
// step, where formatDuration's three digits repeat "3.58 s").
std::string formatTick(int64_t offset_ns, int64_t step_ns);

// The ticks of a window: every `step_ns` (tickStep) from a multiple of it
// after `origin_ns`. Absolute labels count from the origin (the run's
// start); relative ones from the first tick ("0", "+2 us", ...), whose own
// time from the origin is `base`.
struct AxisTick {
  int64_t t_ns = 0;
  std::string label;
};
struct AxisLabels {
  int64_t step_ns = 1;
  std::vector<AxisTick> ticks;
  std::string base;  // relative labels: the first tick's time from the origin
};
AxisLabels axisLabels(const TimeMapping& m, int64_t origin_ns, bool relative, double min_spacing_px);

// Index range [first, last) of slices that may intersect [t0, t1): first is
// the first slice whose running maximum end exceeds t0, last the first slice
// starting at or after t1. Works for nested slices.
size_t firstIndex(const std::vector<int64_t>& max_end_ns, int64_t t0_ns);
size_t lastIndex(const std::vector<int64_t>& start_ns, int64_t t1_ns);

// Slice under time t on a track, or -1. When several slices contain t (nested
// imports) the one that starts last (innermost) wins; when none contains t,
// the nearest within tolerance_ns.
int64_t hitTest(const Track& track, int64_t t_ns, int64_t tolerance_ns);

// A box to draw: one slice (count == 1) or a run of slices too narrow to see
// on their own, folded into one box that says how many it holds.
struct LaneBox {
  float x0 = 0;
  float x1 = 0;
  uint32_t first = 0;  // index of the first slice in the box
  uint32_t count = 1;
};

// Boxes for the slices of [start, end) visible under mapping m. Each box is at
// least min_px wide; slices narrower than merge_px are folded with the slices
// that start within the next merge_px pixels. Work is O(boxes * log n), not
// O(slices), so a fully zoomed-out lane of a million slices costs about one
// binary search per pixel column.
//
// `start_sample` (optional) holds start_ns[k * kSampleStride] for every k: a
// small index that stays in cache, so each jump costs a search in it plus one
// within a block instead of ~20 cache misses over the whole array.
void coalesce(const int64_t* start_ns, const int64_t* end_ns, const int64_t* max_end_ns, size_t n,
              const TimeMapping& m, double merge_px, std::vector<LaneBox>& out,
              const std::vector<int64_t>* start_sample = nullptr);

// First index in [lo, hi) whose start is >= t (hi when none), using the
// sampled index when given.
size_t lowerBoundStart(const int64_t* start_ns, size_t lo, size_t hi, int64_t t,
                       const std::vector<int64_t>* start_sample);

struct OverlapResult {
  IntervalLane lane;  // OverlapCode per interval
  int64_t compute_ns = 0;
  int64_t comm_ns = 0;
  int64_t hidden_ns = 0;
  int64_t exposed_ns = 0;
};

// Union of a sorted track's slices as disjoint sorted intervals.
void unionOf(const Track& track, std::vector<int64_t>& starts, std::vector<int64_t>& ends);
// Union of two disjoint sorted interval lists.
void unionMerge(std::vector<int64_t>& a_starts, std::vector<int64_t>& a_ends,
                const std::vector<int64_t>& b_starts, const std::vector<int64_t>& b_ends);

// Hidden communication = communication busy time that lies under compute busy
// time; exposed = communication busy time with no compute at all (Holistic
// Trace Analysis' comm/compute overlap, per rank, here as intervals).
OverlapResult computeOverlap(const std::vector<const Track*>& compute,
                             const std::vector<const Track*>& comm);

// Phase lane: runs of equal phase on the compute streams of a rank. A run
// lasts from the start of its first slice to the end of its last slice.
IntervalLane computePhaseLane(const std::vector<const Track*>& compute);

}  // namespace tandem::gui
