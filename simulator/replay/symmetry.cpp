// Symmetry check: may one rank stand for every rank of its program?
//
// It may when the ranks are interchangeable: they run the same program (the
// Plan says so by listing them in one RankPlan), sit on identical devices at
// the same kind of place in the machine (same number of the program's ranks
// per host, same total link bandwidth out of and into the device), and every
// process group holds ranks of a single program, so a collective's members
// all reach it at the same time as their representative. A group may span
// programs (pipeline stages) when its ranks hold the same place in their
// programs' rank lists: the group at the first place joins the programs'
// representatives (the lowest ranks), and each other such group is the same
// exchange between the ranks that representatives stand for. Such a
// group's transfers are simulated for the representatives' group only: the
// others' flows, which would share links with them only where ranks at
// different places share one, are not.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

#include "simulator/replay/replay.h"

namespace tandem::sim {

std::string symmetryProblem(const Plan& plan, const Topology& topo, const std::vector<int>& rank_device) {
  const int world = plan.world_size;
  if (int(rank_device.size()) != world) return "the rank-to-device map does not cover the world";
  std::vector<int> program(size_t(world), -1), place(size_t(world), -1);
  for (int p = 0; p < int(plan.programs.size()); ++p) {
    std::vector<int> ranks = plan.programs[size_t(p)].ranks;
    std::sort(ranks.begin(), ranks.end());
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] >= 0 && ranks[i] < world) {
        program[size_t(ranks[i])] = p;
        place[size_t(ranks[i])] = int(i);
      }
  }

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
      if (a.model != b.model || a.bf16_flops != b.bf16_flops || a.fp32_flops != b.fp32_flops || a.fp8_flops != b.fp8_flops ||
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
    for (int r : g.ranks)
      if (r < 0 || r >= world) return "group '" + g.name + "' names rank " + std::to_string(r) + " outside the world";
    if (g.ranks.empty()) continue;
    const int first = g.ranks.front();
    const bool spans = std::any_of(g.ranks.begin(), g.ranks.end(),
                                   [&](int r) { return program[size_t(r)] != program[size_t(first)]; });
    if (!spans) continue;
    for (int r : g.ranks)
      if (place[size_t(r)] != place[size_t(first)])
        return "group '" + g.name + "' mixes ranks of different programs at different places in them (" +
               std::to_string(first) + " and " + std::to_string(r) + ")";
  }
  return {};
}

}  // namespace tandem::sim
