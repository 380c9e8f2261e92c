#pragma once
// Statistics over the slices of a timeline, for the statistics panel and the
// aggregate table of a selected time range, and the facts shown for one
// selected slice. Qt-free. Percentiles use the nearest-rank method, as the
// trace store's analyses do, so the figures match `tandem report`.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gui/timeline_data.h"
#include "traces/analysis/analysis.h"

namespace tandem::gui {

enum class StatsGroup { Name, Op, Phase };

// Per group: count, total, mean, p95 of slice durations; FLOPs and bytes from
// the plan facts, once per execution of a task (consecutive slices of one
// task on a track in one step are one); achieved TFLOP/s and GB/s over the
// group's total time.
// Counts the slices overlapping [t0_ns, t1_ns) with their whole durations.
// Rows are sorted by total time, longest first.
std::vector<traces::KernelStat> sliceStats(const TimelineData& data, StatsGroup group, int64_t t0_ns,
                                           int64_t t1_ns);

// Field / value pairs describing slice `index` of track `track` (its task's
// achieved TFLOP/s or GB/s over the execution it belongs to: the task's
// kernels in a row on the track in one step); when
// `compare` is given, the same task's occurrence there (matched by rank,
// stream kind, plan task id and occurrence number) and the difference.
std::vector<std::pair<std::string, std::string>> sliceDetails(const TimelineData& data, int track,
                                                              int64_t index, const TimelineData* compare);

// Index of the slice of `other` that carries the same plan task as `index`
// of `track` in `data` (same rank, stream kind, task id and name, same
// occurrence; by name alone when the ids differ between plans), or -1.
// The matched track is written to other_track.
int64_t counterpartOf(const TimelineData& data, int track, int64_t index, const TimelineData& other,
                      int& other_track);

std::string phaseName(uint8_t phase);

}  // namespace tandem::gui
