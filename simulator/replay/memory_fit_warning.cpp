#include "simulator/replay/memory_fit_warning.h"

#include <fmt/format.h>

#include "engine/memory/gpu_footprint.h"
#include "engine/memory/memory_fit.h"
#include "traces/trackers/stats.h"

namespace tandem::sim {
namespace {

constexpr double kGiB = double(int64_t(1) << 30);

}  // namespace

std::optional<MemoryShortfall> memoryShortfall(const Plan& plan, const Topology& topo, const SimResult& result) {
  // Per program, once: thousands of ranks share a handful of programs.
  std::vector<int64_t> executor_bytes(plan.programs.size(), -1);
  std::optional<MemoryShortfall> worst;
  for (const SimRank& r : result.ranks) {
    if (r.device < 0 || size_t(r.device) >= topo.devices.size()) continue;
    const DeviceSpec& d = topo.devices[size_t(r.device)];
    if (d.memory_bytes <= 0) continue;  // a topology file that does not say
    const RankPlan& program = plan.programs.at(size_t(r.program));
    int64_t& executor = executor_bytes[size_t(r.program)];
    if (executor < 0) executor = gpu_footprint::executorFootprint(program).total();
    const int64_t needed = program.memory.arena_bytes + executor + gpu_footprint::kRunReserveBytes;
    if (needed <= d.memory_bytes || (worst && needed - d.memory_bytes <= worst->shortBytes())) continue;
    MemoryShortfall s;
    s.rank = r.rank;
    s.device_model = (d.model.empty() ? d.name : d.model) + (d.mig_profile.empty() ? "" : " MIG " + d.mig_profile);
    s.device_bytes = d.memory_bytes;
    s.arena_bytes = program.memory.arena_bytes;
    s.executor_bytes = executor;
    s.needed_bytes = needed;
    worst = s;
  }
  return worst;
}

std::optional<MemoryFitWarning> memoryFitWarning(const Plan& plan, const Topology& topo, const SimResult& result,
                                                 bool suggest_choices) {
  const std::optional<MemoryShortfall> s = memoryShortfall(plan, topo, result);
  if (!s) return std::nullopt;
  std::string line = fmt::format(
      "rank {} needs {:.2f} GiB on its {} (arena {:.2f} + executor {:.2f} + reserve {:.2f} GiB) but the GPU has "
      "{:.2f} GiB: short by {:.2f} GiB, so a real run would refuse this plan",
      s->rank, s->needed_bytes / kGiB, s->device_model, s->arena_bytes / kGiB, s->executor_bytes / kGiB,
      gpu_footprint::kRunReserveBytes / kGiB, s->device_bytes / kGiB, s->shortBytes() / kGiB);
  // The planner's choices against the whole device (a real run sees a
  // little less free: the CUDA context).
  const std::vector<FittingChoice> fits =
      suggest_choices ? choicesThatFit(plan.job, s->device_bytes, gpu_footprint::runOverheadBytes)
                      : std::vector<FittingChoice>{};
  if (!suggest_choices) {
    // The verdict alone.
  } else if (fits.empty()) {
    line += "; no recompute policy, micro-batch or LM head split fits";
  } else {
    line += "; choices that fit: ";
    for (size_t i = 0; i < fits.size(); ++i) line += (i ? "; " : "") + fits[i].text(plan.job);
  }
  const int64_t short_mib = (s->shortBytes() + (int64_t(1) << 20) - 1) >> 20;
  MemoryFitWarning w;
  w.stat = traces::stats::kSimMemoryShortMib.row(short_mib, line);
  w.line = std::move(line);
  w.choices = fits;
  return w;
}

}  // namespace tandem::sim
