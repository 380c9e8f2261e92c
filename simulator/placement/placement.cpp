// Placement: blocks of ranks onto hosts, then ranks onto the GPUs of each
// host (placement.h says how and why).
#include "simulator/placement/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "simulator/placement/host_layout.h"
#include "simulator/topology/routing.h"

namespace tandem::sim {
namespace {

// Hosts that hold GPUs, in host order, with their GPUs (node ids, in id order).
std::vector<std::vector<int>> gpuHosts(const Topology& topo, const Router& router) {
  std::vector<std::vector<int>> hosts;
  for (int h = 0; h < int(topo.hosts.size()); ++h)
    if (!router.devicesOfHost(h).empty()) hosts.push_back(router.devicesOfHost(h));
  return hosts;
}

// Traffic entries in placement order: tier, then heaviest first.
std::vector<size_t> placementOrder(const std::vector<GroupTraffic>& traffic) {
  std::vector<size_t> order(traffic.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (traffic[a].tier != traffic[b].tier) return traffic[a].tier < traffic[b].tier;
    return traffic[a].bytes > traffic[b].bytes;
  });
  return order;
}

// Ranks in rank order, `capacity[h]` to host h, as long as ranks are left.
std::vector<std::vector<int>> consecutiveBlocks(int world, const std::vector<int>& capacity) {
  std::vector<std::vector<int>> blocks;
  int next = 0;
  for (size_t h = 0; h < capacity.size() && next < world; ++h) {
    blocks.emplace_back();
    for (int k = 0; k < capacity[h] && next < world; ++k) blocks.back().push_back(next++);
  }
  return blocks;
}

// Host-sized blocks of ranks: groups merged in placement order while the
// merged set fits one host, the sets then packed into hosts first fit in
// rank order. Empty when they do not pack into `hosts` hosts.
std::vector<std::vector<int>> mergedBlocks(const Plan& plan, const std::vector<GroupTraffic>& traffic, int capacity,
                                           int hosts) {
  const int world = plan.world_size;
  std::vector<int> parent(static_cast<size_t>(world)), members(static_cast<size_t>(world), 1);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[size_t(x)] != x) x = parent[size_t(x)] = parent[size_t(parent[size_t(x)])];
    return x;
  };
  for (size_t i : placementOrder(traffic)) {
    std::vector<int> roots;
    for (int r : plan.groups[size_t(traffic[i].group)].ranks) roots.push_back(find(r));
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    int total = 0;
    for (int root : roots) total += members[size_t(root)];
    if (total > capacity || roots.size() < 2) continue;
    for (size_t k = 1; k < roots.size(); ++k) {
      parent[size_t(roots[k])] = roots[0];
      members[size_t(roots[0])] += members[size_t(roots[k])];
    }
  }
  std::map<int, std::vector<int>> by_root;  // ranks ascending inside each
  for (int r = 0; r < world; ++r) by_root[find(r)].push_back(r);
  std::vector<std::vector<int>> clusters;
  for (auto& [root, ranks] : by_root) clusters.push_back(std::move(ranks));
  std::sort(clusters.begin(), clusters.end(),
            [](const std::vector<int>& a, const std::vector<int>& b) { return a.front() < b.front(); });
  std::vector<std::vector<int>> blocks;
  for (const auto& c : clusters) {
    auto fits = std::find_if(blocks.begin(), blocks.end(),
                             [&](const std::vector<int>& b) { return b.size() + c.size() <= size_t(capacity); });
    if (fits == blocks.end()) {
      if (int(blocks.size()) == hosts) return {};
      blocks.emplace_back();
      fits = blocks.end() - 1;
    }
    fits->insert(fits->end(), c.begin(), c.end());
  }
  for (auto& b : blocks) std::sort(b.begin(), b.end());
  return blocks;
}

// Block b on host slot host_of[b]: pairwise swaps of the slots (empty hosts
// included) while the cost of the traffic between hosts falls. `gbps` is the
// bottleneck between the hosts' first GPUs.
void swapBlocksBetweenHosts(const std::vector<GroupTraffic>& traffic, const Plan& plan,
                            const std::vector<int>& block_of_rank, const std::vector<double>& gbps, int hosts,
                            std::vector<int>& host_of, int max_passes) {
  std::map<std::string, int> family_index;
  for (const GroupTraffic& t : traffic) family_index.try_emplace(t.family, int(family_index.size()));
  auto cost = [&](const std::vector<int>& slot) {
    std::vector<double> worst(family_index.size(), 0);
    PlacementCost c;
    std::vector<int> hs;
    for (const GroupTraffic& t : traffic) {
      hs.clear();
      for (int r : plan.groups[size_t(t.group)].ranks) hs.push_back(slot[size_t(block_of_rank[size_t(r)])]);
      std::sort(hs.begin(), hs.end());
      hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
      if (hs.size() < 2) continue;
      double g = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < hs.size(); ++i)
        g = std::min(g, gbps[size_t(hs[i] * hosts + hs[(i + 1) % hs.size()])]);
      const double s = t.bytes / (g * 1e9);
      double& w = worst[size_t(family_index.at(t.family))];
      w = std::max(w, s);
      c.groups_s += s;
    }
    for (double w : worst) c.families_s += w;
    return c;
  };
  // owner[h]: the block on host slot h, or -1.
  std::vector<int> owner(size_t(hosts), -1);
  for (size_t b = 0; b < host_of.size(); ++b) owner[size_t(host_of[b])] = int(b);
  PlacementCost best = cost(host_of);
  for (int pass = 0; pass < max_passes; ++pass) {
    bool improved = false;
    for (int a = 0; a < hosts; ++a)
      for (int b = a + 1; b < hosts; ++b) {
        if (owner[size_t(a)] < 0 && owner[size_t(b)] < 0) continue;
        auto apply = [&] {
          std::swap(owner[size_t(a)], owner[size_t(b)]);
          if (owner[size_t(a)] >= 0) host_of[size_t(owner[size_t(a)])] = a;
          if (owner[size_t(b)] >= 0) host_of[size_t(owner[size_t(b)])] = b;
        };
        apply();
        const PlacementCost c = cost(host_of);
        if (cheaper(c, best)) {
          best = c;
          improved = true;
        } else {
          apply();  // swap back
        }
      }
    if (!improved) break;
  }
}

// Which host each block goes to: in order, unless the hosts are joined
// unevenly and few enough to search.
std::vector<int> hostsOfBlocks(const Plan& plan, const std::vector<GroupTraffic>& traffic, const Router& router,
                               const std::vector<std::vector<int>>& hosts,
                               const std::vector<std::vector<int>>& blocks, const PlacementOptions& options,
                               std::vector<std::string>& notes) {
  std::vector<int> host_of(blocks.size());
  std::iota(host_of.begin(), host_of.end(), 0);
  const int n = int(hosts.size());
  if (n < 2 || blocks.size() < 2) return host_of;
  if (n > options.max_block_hosts) {
    notes.push_back(fmt::format("hosts: {} blocks in rank order ({} hosts, more than the {} searched)", blocks.size(),
                                n, options.max_block_hosts));
    return host_of;
  }
  std::vector<double> gbps(size_t(n * n), std::numeric_limits<double>::infinity());
  bool uniform = true;
  double first = -1;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const double g = router.bottleneckGbps(hosts[size_t(a)].front(), hosts[size_t(b)].front());
      gbps[size_t(a * n + b)] = g;
      if (first < 0) first = g;
      uniform = uniform && g == first;
    }
  if (uniform) {
    notes.push_back(fmt::format("hosts: {} blocks in rank order (every pair of hosts is joined alike, {:.6g} GB/s)",
                                blocks.size(), first));
    return host_of;
  }
  std::vector<int> block_of_rank(size_t(plan.world_size), -1);
  for (size_t b = 0; b < blocks.size(); ++b)
    for (int r : blocks[b]) block_of_rank[size_t(r)] = int(b);
  std::vector<GroupTraffic> across;
  for (const GroupTraffic& t : traffic) {
    const auto& ranks = plan.groups[size_t(t.group)].ranks;
    if (std::any_of(ranks.begin(), ranks.end(),
                    [&](int r) { return block_of_rank[size_t(r)] != block_of_rank[size_t(ranks.front())]; }))
      across.push_back(t);
  }
  swapBlocksBetweenHosts(across, plan, block_of_rank, gbps, n, host_of, options.max_swap_passes);
  notes.push_back(fmt::format("hosts: {} blocks placed by pairwise swaps over {} unevenly joined hosts",
                              blocks.size(), n));
  return host_of;
}

}  // namespace

std::vector<int> identityPlacement(const Plan& plan, const Topology& topo) {
  if (plan.world_size > int(topo.devices.size()))
    throw PlacementError(fmt::format("placement: the plan has {} ranks but topology '{}' has {} GPUs",
                                     plan.world_size, topo.name, topo.devices.size()));
  std::vector<int> map(size_t(plan.world_size));
  std::iota(map.begin(), map.end(), 0);
  return map;
}

Placement proposePlacement(const Plan& plan, const Topology& topo, const PlacementOptions& options) {
  const int world = plan.world_size;
  Placement out;
  const std::vector<int> identity = identityPlacement(plan, topo);
  const Router router(topo);
  const TrafficCost cost(plan, router, planTraffic(plan));
  const std::vector<GroupTraffic>& traffic = cost.traffic();
  out.identity_cost = cost.of(identity);
  out.rank_device = identity;
  out.cost = out.identity_cost;
  if (traffic.empty() || world < 2) {
    out.notes.push_back("the plan moves no bytes between ranks: every map is as good as the identity");
    return out;
  }

  const std::vector<std::vector<int>> hosts = gpuHosts(topo, router);
  std::vector<int> capacity;
  for (const auto& h : hosts) capacity.push_back(int(h.size()));
  const bool alike = std::all_of(capacity.begin(), capacity.end(), [&](int c) { return c == capacity.front(); });
  std::vector<std::vector<int>> blocks;
  if (hosts.size() > 1 && alike) {
    blocks = mergedBlocks(plan, traffic, capacity.front(), int(hosts.size()));
    if (!blocks.empty())
      out.notes.push_back(fmt::format("blocks: {} host-sized blocks of up to {} ranks, groups merged tensor parallel "
                                      "first, then pipeline, then data parallel",
                                      blocks.size(), capacity.front()));
  }
  if (blocks.empty()) {
    blocks = consecutiveBlocks(world, capacity);
    if (hosts.size() > 1)
      out.notes.push_back(fmt::format("blocks: ranks in order over {} hosts{}", blocks.size(),
                                      alike ? "" : " (hosts of different sizes)"));
  }
  const std::vector<int> host_of = hostsOfBlocks(plan, traffic, router, hosts, blocks, options, out.notes);

  HostLayoutSolver solver(plan, router, traffic, options.max_swap_passes);
  std::vector<int> proposal(size_t(world), -1);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::vector<int>& devices = hosts[size_t(host_of[b])];
    const std::vector<int> local = solver.solve(blocks[b], devices);
    for (size_t i = 0; i < blocks[b].size(); ++i) proposal[size_t(blocks[b][i])] = devices[size_t(local[i])];
  }
  out.notes.push_back(fmt::format("inside hosts: {} distinct layout{} solved (greedy, then pairwise swaps){}",
                                  solver.solved(), solver.solved() == 1 ? "" : "s",
                                  solver.reused() > 0 ? fmt::format(", reused on {} alike hosts", solver.reused())
                                                      : std::string()));
  const PlacementCost proposed = cost.of(proposal);
  if (proposal != identity && cheaper(proposed, out.identity_cost)) {
    out.rank_device = proposal;
    out.identity = false;
    out.cost = proposed;
  } else {
    out.notes.push_back("the identity is at least as good by the cost: kept");
  }
  return out;
}

PlacementVerdict choosePlacement(const Plan& plan, const Topology& topo, const CostModel& cost,
                                 const SimOptions& options, const PlacementOptions& placement) {
  PlacementVerdict v;
  v.proposed = proposePlacement(plan, topo, placement);
  SimOptions so = options;
  const bool exact = plan.world_size <= placement.exact_simulation_ranks;
  if (exact) so.symmetry = SymmetryMode::Off;
  so.rank_device = identityPlacement(plan, topo);
  const SimResult base = simulatePlan(plan, topo, cost, so);
  v.identity_step_ns = base.step_ns;
  v.proposed_step_ns = base.step_ns;
  v.rank_device = so.rank_device;
  auto noteOf = [&](const SimStats& st) {
    if (exact) return std::string("every rank simulated");
    if (st.symmetric) return st.symmetry_note;
    return "every rank simulated" + (st.symmetry_note == "off" ? std::string() : " (" + st.symmetry_note + ")");
  };
  v.simulation_note = noteOf(base.stats);
  if (!v.proposed.identity) {
    so.rank_device = v.proposed.rank_device;
    const SimResult moved = simulatePlan(plan, topo, cost, so);
    v.proposed_step_ns = moved.step_ns;
    if (moved.step_ns <= base.step_ns) {
      v.proposal_chosen = true;
      v.rank_device = v.proposed.rank_device;
    }
    if (noteOf(moved.stats) != v.simulation_note) v.simulation_note += "; with the proposal: " + noteOf(moved.stats);
  }
  v.chosen_step_ns = v.proposal_chosen ? v.proposed_step_ns : v.identity_step_ns;
  return v;
}

}  // namespace tandem::sim
