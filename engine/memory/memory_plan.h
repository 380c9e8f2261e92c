#pragma once
// Static memory planning: one arena per rank.
//
// Persistent buffers (parameters, master weights, gradient buckets, optimizer
// state, workspace) are laid out first, back to back. Every other buffer gets
// a live range [first use, last use] over the rank's task list and is placed
// greedily by size (largest first, lowest offset that no live-overlapping
// buffer occupies). A buffer touched by a task on any stream but the main
// compute stream (0: a comm stream, the weight-gradient stream) stays live
// until stream 0 waits for that stream at or after the task (the event
// join); without such a join it stays live to the end of the step. A task off
// stream 0 that writes a transient buffer must not be able to start before
// the stream-0 tasks listed ahead of it have finished reading that memory
// (the weight-gradient stream writes persistent buffers only; the embedding
// gradient's all-gather directly follows the task whose output it waits for).
//
// The lower bound is the largest sum of live (aligned) buffer sizes at any
// task: no placement can do better, so arena / lower bound measures the
// planner's fragmentation.

#include <cstdint>

#include "engine/plan/plan.h"

namespace tandem {

inline constexpr int64_t kBufferAlignment = 256;

MemoryPlan planMemory(RankPlan& rp);

// Checks that no two buffers with overlapping live ranges overlap in memory
// and that every buffer lies inside the arena. Returns an empty string when
// the plan is sound, otherwise a description of the first conflict.
std::string checkMemoryPlan(const RankPlan& rp);

}  // namespace tandem
