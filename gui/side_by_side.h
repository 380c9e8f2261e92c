#pragma once
// Two runs on one time axis: a real run and its simulation (or any two runs
// of one plan), one's lanes under the other's, the second shifted so that a
// chosen step of each starts at the same time. Slices are matched by plan
// task (the join key real <-> simulated, as tandem compare uses), rank and
// step counted from the aligned one: picking a task in one run finds its
// twin in the other.

#include <memory>
#include <string>
#include <vector>

#include "gui/timeline_data.h"
#include "gui/timeline_palette.h"

namespace tandem::gui {

struct SideBySide {
  std::shared_ptr<TimelineData> data;  // A's ranks, then B's
  size_t first_b_track = 0;            // tracks [0, first_b_track) are A's
  size_t first_b_rank = 0;             // ranks likewise
  int b_rank_offset = 0;               // B's rank numbers in data (Track::rank) = its own + this
  int step_a = -1, step_b = -1;        // the aligned steps (indices into each run's steps)
  int64_t shift_ns = 0;                // added to B's times
  std::vector<StepMark> steps_b;       // B's steps, shifted
};

// Builds the combined view. step_a, step_b: indices into each run's steps
// (-1: each run's median step; runs without steps align their starts).
// Labels name the two halves in the rank headers ("real", "simulated").
SideBySide sideBySide(const TimelineData& a, const TimelineData& b, int step_a, int step_b,
                      const std::string& label_a, const std::string& label_b);

// The twin of a slice in the other run: the first slice of the same plan
// task on the same rank in the step as far from the aligned step; an invalid
// reference when the slice has no plan task or the other run has no twin.
SliceRef twinOf(const SideBySide& s, SliceRef slice);

// Colours both runs' slices by how long the second run took for the task
// against the first, per (rank, task, step): its time there over the
// first run's, both summed over the task's slices in the step. Below 0.8
// MuchShorter, below 0.95 Shorter, up to 1.05 Alike, up to 1.25 Longer,
// above MuchLonger; slices without a twin task stay grey (Other). `on`
// false returns the phase colours. Returns the (rank, task, step) pairs
// matched.
int colourByDifference(SideBySide& s, bool on);
PaintClass differenceClass(double second_over_first);

}  // namespace tandem::gui
