#include "simulator/calibrate/main_kernel.h"

#include <algorithm>
#include <limits>

namespace tandem::sim {

std::optional<MainKernel> mainKernelOf(const traces::ActivityRow& a) {
  if (a.kind != traces::ActivityKind::Kernel || !a.geometry) return std::nullopt;
  const traces::LaunchGeometry& g = *a.geometry;
  const int64_t blocks = int64_t(g.grid_x) * g.grid_y * g.grid_z;
  if (blocks <= 0 || blocks > std::numeric_limits<int>::max()) return std::nullopt;
  MainKernel k;
  k.blocks = int(blocks);
  if (g.hasResources()) {
    k.threads = g.block_x * g.block_y * g.block_z;
    k.registers = g.registers_per_thread;
    k.shared_bytes = g.shared_memory_bytes;
    k.cluster = g.cluster_x > 0 ? g.cluster_x * std::max(1, g.cluster_y) * std::max(1, g.cluster_z) : 1;
  }
  k.tile = gemmTileFromKernelName(a.name);
  return k;
}

std::map<std::pair<int, int64_t>, MainKernel> mainKernelsByTask(traces::TraceReader& reader, int64_t run) {
  std::map<std::pair<int, int64_t>, std::pair<int64_t, MainKernel>> longest;  // (duration, kernel)
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.task_id < 0) return;
    const auto k = mainKernelOf(a);
    if (!k) return;
    auto [it, fresh] = longest.try_emplace({a.rank, a.task_id}, a.end_ns - a.start_ns, *k);
    if (!fresh && a.end_ns - a.start_ns > it->second.first) it->second = {a.end_ns - a.start_ns, *k};
  });
  std::map<std::pair<int, int64_t>, MainKernel> out;
  for (auto& [key, v] : longest) out.emplace(key, std::move(v.second));
  return out;
}

}  // namespace tandem::sim
