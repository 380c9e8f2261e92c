// Symmetry check: may one rank stand for every rank of its program?
//
// It may when the ranks are interchangeable: they run the same program (the
// Plan says so by listing them in one RankPlan), sit on identical devices at
// the same kind of place in the machine (same number of the program's ranks
// per host, same total link bandwidth out of and into the device), and every
// process group holds ranks of a single program, so a collective's members
// all reach it at the same time as their representative.
#include <fmt/format.h>

#include <map>
#include <string>

#include "simulator/engine.h"

namespace tandem::sim {

std::string symmetryProblem(const Plan& plan, const Topology& topo, const std::vector<int>& rank_device) {
  const int world = plan.world_size;
  if (int(rank_device.size()) != world) return "the rank-to-device map does not cover the world";
  std::vector<int> program(size_t(world), -1);
  for (int p = 0; p < int(plan.programs.size()); ++p)
    for (int r : plan.programs[size_t(p)].ranks)
      if (r >= 0 && r < world) program[size_t(r)] = p;

  std::vector<double> out_gbps(size_t(topo.nodeCount()), 0), in_gbps(size_t(topo.nodeCount()), 0);
  for (const Link& l : topo.links) {
    out_gbps[size_t(l.src)] += l.gbps;
    in_gbps[size_t(l.dst)] += l.gbps;
  }
  for (int p = 0; p < int(plan.programs.size()); ++p) {
    const auto& ranks = plan.programs[size_t(p)].ranks;
    if (ranks.empty()) continue;
    const int d0 = rank_device[size_t(ranks.front())];
    const DeviceSpec& a = topo.devices[size_t(d0)];
    std::map<int, int> per_host;
    for (int r : ranks) {
      const int d = rank_device[size_t(r)];
      const DeviceSpec& b = topo.devices[size_t(d)];
      if (a.model != b.model || a.bf16_flops != b.bf16_flops || a.fp32_flops != b.fp32_flops ||
          a.hbm_gbps != b.hbm_gbps || a.mig_fraction != b.mig_fraction)
        return "rank " + std::to_string(r) + " runs on " + b.name + " (" + b.model + "), unlike rank " +
               std::to_string(ranks.front()) + " on " + a.name + " (" + a.model + ")";
      if (a.speed != b.speed)
        return "rank " + std::to_string(r) + " runs on " + b.name + " at speed " + fmt::format("{}", b.speed) +
               ", unlike rank " + std::to_string(ranks.front()) + " on " + a.name;
      if (out_gbps[size_t(d)] != out_gbps[size_t(d0)] || in_gbps[size_t(d)] != in_gbps[size_t(d0)])
        return "device " + b.name + " of rank " + std::to_string(r) + " has different links than " + a.name;
      ++per_host[topo.devices[size_t(d)].host];
    }
    const int first = per_host.begin()->second;
    for (const auto& [host, count] : per_host)
      if (count != first)
        return "program " + std::to_string(p) + " has " + std::to_string(count) + " ranks on host " +
               std::to_string(host) + " but " + std::to_string(first) + " on host " +
               std::to_string(per_host.begin()->first);
  }
  for (const ProcessGroup& g : plan.groups) {
    int p0 = -2;
    for (int r : g.ranks) {
      if (r < 0 || r >= world) return "group '" + g.name + "' names rank " + std::to_string(r) + " outside the world";
      if (p0 == -2) p0 = program[size_t(r)];
      if (program[size_t(r)] != p0)
        return "group '" + g.name + "' mixes ranks of different programs (" + std::to_string(g.ranks.front()) +
               " and " + std::to_string(r) + ")";
    }
  }
  return {};
}

}  // namespace tandem::sim
