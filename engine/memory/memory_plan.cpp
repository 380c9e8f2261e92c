#include "engine/memory/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/memory/buffer_placement.h"

namespace tandem {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// Task index at which a buffer last touched by `task` may be reused.
class ReleasePoints {
 public:
  explicit ReleasePoints(const RankPlan& rp) : rp_(rp) {
    // For every event, the first task index of the main compute stream (0)
    // that waits on it.
    const int n = int(rp.tasks.size());
    std::vector<int> first_wait(rp.num_events, n);
    for (int i = 0; i < n; ++i) {
      const Task& t = rp.tasks[i];
      if (t.stream != 0) continue;
      for (int e : t.wait_events) first_wait[e] = std::min(first_wait[e], i);
    }
    // Walking each other stream backwards, the join of a task is the
    // earliest join among the events recorded at or after it.
    release_.assign(n, -1);
    std::vector<int> next_join(rp.streams.size(), n - 1);
    for (int i = n - 1; i >= 0; --i) {
      const Task& t = rp.tasks[i];
      if (t.stream == 0) {
        release_[i] = i;
        continue;
      }
      if (t.record_event >= 0)
        next_join[t.stream] = std::min(next_join[t.stream], std::max(i, first_wait[t.record_event]));
      release_[i] = std::max(i, next_join[t.stream]);
    }
  }
  int at(int task) const { return release_[task]; }

 private:
  const RankPlan& rp_;
  std::vector<int> release_;
};

}  // namespace

MemoryPlan planMemory(RankPlan& rp) {
  const int n = int(rp.tasks.size());
  const ReleasePoints release(rp);
  for (auto& b : rp.buffers) b.first_use = b.last_use = -1;
  auto touch = [&](int buffer, int task) {
    Buffer& b = rp.buffers[buffer];
    Buffer& root = b.parent >= 0 ? rp.buffers[b.parent] : b;
    for (Buffer* x : {&b, &root}) {
      if (x->first_use < 0 || task < x->first_use) x->first_use = task;
      x->last_use = std::max(x->last_use, release.at(task));
    }
  };
  for (int i = 0; i < n; ++i) {
    for (int b : rp.tasks[i].reads) touch(b, i);
    for (int b : rp.tasks[i].writes) touch(b, i);
  }

  // Persistent region, grouped by category so the layout reads well.
  static constexpr TensorCategory kOrder[] = {TensorCategory::Parameter, TensorCategory::MasterWeight,
                                              TensorCategory::Gradient, TensorCategory::OptimizerState,
                                              TensorCategory::Workspace, TensorCategory::Input,
                                              TensorCategory::Activation};
  int64_t top = 0;
  for (TensorCategory cat : kOrder)
    for (auto& b : rp.buffers)
      if (b.persistent && b.parent < 0 && b.category == cat) {
        b.offset = top;
        b.first_use = 0;
        b.last_use = std::max(0, n - 1);
        top += aligned(b.bytes);
      }
  const int64_t persistent_bytes = top;

  // Transient buffers: greedy by size over live ranges.
  std::vector<int> order;
  for (auto& b : rp.buffers)
    if (!b.persistent && b.parent < 0 && b.first_use >= 0) order.push_back(b.id);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Buffer &x = rp.buffers[a], &y = rp.buffers[b];
    if (aligned(x.bytes) != aligned(y.bytes)) return aligned(x.bytes) > aligned(y.bytes);
    if (x.first_use != y.first_use) return x.first_use < y.first_use;
    return a < b;
  });
  PlacedBuffers placed(n);
  int64_t arena = persistent_bytes;
  for (int id : order) {
    Buffer& b = rp.buffers[id];
    const int64_t size = aligned(b.bytes);
    const int64_t candidate = placed.lowestFit(b.first_use, b.last_use, size);
    placed.add({candidate, size, b.first_use, b.last_use});
    b.offset = persistent_bytes + candidate;
    arena = std::max(arena, b.offset + size);
  }
  for (auto& b : rp.buffers)
    if (b.parent >= 0) {
      const Buffer& root = rp.buffers[b.parent];
      b.offset = root.offset + b.parent_offset;
    }

  // Lower bound and the breakdown at the peak: a sweep over live ranges.
  MemoryPlan mp;
  std::vector<int64_t> delta(n + 1, 0), act_delta(n + 1, 0);
  for (int id : order) {
    const Buffer& b = rp.buffers[id];
    delta[b.first_use] += aligned(b.bytes);
    delta[b.last_use + 1] -= aligned(b.bytes);
    act_delta[b.first_use] += aligned(b.bytes);
    act_delta[b.last_use + 1] -= aligned(b.bytes);
  }
  int64_t live = 0, act_live = 0, best = -1;
  for (int i = 0; i < n; ++i) {
    live += delta[i];
    act_live += act_delta[i];
    if (live > best) {
      best = live;
      mp.peak_task = i;
    }
    mp.activation_peak_bytes = std::max(mp.activation_peak_bytes, act_live);
  }
  mp.lower_bound_bytes = persistent_bytes + std::max<int64_t>(best, 0);
  mp.arena_bytes = arena;
  mp.peak_bytes = arena;
  for (const auto& b : rp.buffers) {
    if (b.parent >= 0 || b.first_use < 0) continue;
    if (b.persistent || (b.first_use <= mp.peak_task && mp.peak_task <= b.last_use))
      mp.by_category[std::string(toString(b.category))] += aligned(b.bytes);
  }
  return mp;
}

std::string checkMemoryPlan(const RankPlan& rp) {
  std::vector<const Buffer*> roots;
  for (const auto& b : rp.buffers)
    if (b.parent < 0 && b.first_use >= 0) roots.push_back(&b);
  std::sort(roots.begin(), roots.end(), [](const Buffer* a, const Buffer* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < roots.size(); ++i) {
    const Buffer& a = *roots[i];
    if (a.offset < 0 || a.offset + a.bytes > rp.memory.arena_bytes)
      return fmt::format("buffer {} [{}, {}) lies outside the arena of {} bytes", a.name, a.offset,
                         a.offset + a.bytes, rp.memory.arena_bytes);
    for (size_t j = i + 1; j < roots.size() && roots[j]->offset < a.offset + a.bytes; ++j) {
      const Buffer& b = *roots[j];
      const bool time_overlap = !(a.last_use < b.first_use || b.last_use < a.first_use);
      if (time_overlap)
        return fmt::format("buffers {} and {} overlap in memory while both are live", a.name, b.name);
    }
  }
  return {};
}

}  // namespace tandem
