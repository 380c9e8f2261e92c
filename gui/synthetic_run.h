#pragma once
// A generated data-parallel GPT-2-like run for tests, the benchmark and the
// demo window: per rank a compute stream (forward, recompute, backward,
// optimizer), a comm stream (bucketed all-reduces issued during backward,
// the last one exposed) and a copy stream (batch loads). Deterministic for a
// given spec. Durations are plausible, not measured.

#include <cstdint>
#include <vector>

#include "engine/ir/types.h"
#include "gui/timeline_data.h"

namespace tandem::gui {

struct SyntheticSpec {
  int ranks = 8;
  int steps = 2;
  int layers = 12;
  int buckets = 6;  // gradient buckets, each covering layers/buckets layers
  // Per layer; empty means "full for the first half of the layers, none for
  // the rest" so every view has recompute work to show.
  std::vector<RecomputePolicy> recompute;
  uint64_t seed = 1;
};

// Slices one step produces on all ranks together (for sizing a run).
int64_t syntheticSlicesPerStep(const SyntheticSpec& spec);

TimelineData makeSyntheticRun(const SyntheticSpec& spec);

}  // namespace tandem::gui
