#include "simulator/pipeline/checkpoint_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "engine/checkpoint/checkpoint.h"

namespace tandem::sim {
namespace {

// Host memory allocated, touched and page-locked by a run's first copy-out:
// 8.1-8.8 s for 15.0 GB on one H100 machine (docs/benchmarks.md).
constexpr double kFirstSetupSecondsPerGb = 0.55;

// The GPU's link towards the host (its PCIe link), GB/s; 0 when the
// topology has none.
double hostLinkGbps(const Topology& topo, int device) {
  double best = 0;
  for (const Link& l : topo.links)
    if (l.src == device && l.kind == LinkKind::Pcie) best = std::max(best, l.gbps);
  return best;
}

int64_t checkpointBytes(const RankPlan& program) {
  int64_t n = 0;
  for (int id : checkpoint::savedBuffers(program, /*update_pending=*/false)) n += program.buffers.at(size_t(id)).bytes;
  return n;
}

}  // namespace

CheckpointCostEstimate estimateCheckpointCost(const Plan& plan, const Topology& topo, const SimResult& result,
                                              const CheckpointCostSettings& s) {
  if (s.every < 1) throw std::invalid_argument("checkpoint cost: --checkpoint-every must be at least 1");
  if (!(s.host_write_gbps > 0) || !(s.process_write_gbps > 0) || !(s.fallback_copy_gbps > 0))
    throw std::invalid_argument("checkpoint cost: write and copy rates must be above 0 GB/s");
  CheckpointCostEstimate e;
  e.every = s.every;
  std::map<int, int64_t> by_host;
  std::map<int, int64_t> by_program;  // a program's ranks hold the same bytes (thousands of ranks, a few programs)
  double copy_s = 0;
  for (const SimRank& r : result.ranks) {
    auto it = by_program.find(r.program);
    if (it == by_program.end()) it = by_program.emplace(r.program, checkpointBytes(plan.forRank(r.rank))).first;
    const int64_t bytes = it->second;
    double gbps = hostLinkGbps(topo, r.device);
    if (gbps <= 0) {
      gbps = s.fallback_copy_gbps;
      e.copy_gbps_assumed = true;
    }
    e.copy_gbps = e.copy_gbps > 0 ? std::min(e.copy_gbps, gbps) : gbps;
    copy_s = std::max(copy_s, double(bytes) / (gbps * 1e9));
    e.rank_bytes = std::max(e.rank_bytes, bytes);
    const int host = topo.isDevice(r.device) ? topo.devices[size_t(r.device)].host : 0;
    by_host[host] += bytes;
  }
  for (const auto& [host, bytes] : by_host) e.host_bytes = std::max(e.host_bytes, bytes);
  e.copy_s = copy_s;
  e.write_s = std::max(double(e.host_bytes) / (s.host_write_gbps * 1e9),
                       double(e.rank_bytes) / (s.process_write_gbps * 1e9));
  e.between_s = double(s.every) * double(result.step_ns) * 1e-9;
  e.wait_s = std::max(0.0, e.write_s - e.between_s);
  e.per_checkpoint_s = e.copy_s + e.wait_s;
  e.per_step_s = e.per_checkpoint_s / double(s.every);
  e.overhead_pct = result.step_ns > 0 ? 100.0 * e.per_step_s / (double(result.step_ns) * 1e-9) : 0;
  e.first_setup_s = kFirstSetupSecondsPerGb * double(e.rank_bytes) / 1e9;
  return e;
}

std::string describeCheckpointCost(const CheckpointCostEstimate& e) {
  return fmt::format(
      "checkpoint every {} steps: {:.2f} GB per rank ({:.2f} GB from the busiest host); copy-out {:.3f} s at {:.0f} "
      "GB/s{} with the steps waiting, write {:.2f} s beside {:.2f} s of steps{}: {:.3f} s per checkpoint, {:.1f}% "
      "of a step (and {:.1f} s once, the first copy's host memory)",
      e.every, double(e.rank_bytes) / 1e9, double(e.host_bytes) / 1e9, e.copy_s, e.copy_gbps,
      e.copy_gbps_assumed ? " (assumed: no PCIe link in the topology)" : "", e.write_s, e.between_s,
      e.wait_s > 0 ? fmt::format(" (the next copy waits {:.2f} s for it)", e.wait_s) : std::string(),
      e.per_checkpoint_s, e.overhead_pct, e.first_setup_s);
}

}  // namespace tandem::sim
