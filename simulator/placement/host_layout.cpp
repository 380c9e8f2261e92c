#include "simulator/placement/host_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

namespace tandem::sim {
namespace {

struct LocalGroup {
  int family = 0;
  int tier = 3;
  double bytes = 0;
  std::vector<int> members;  // indices into the block, ascending
};

// One host's problem: `ranks` of a block on `devices` GPUs.
struct LocalProblem {
  int ranks = 0;
  int devices = 0;
  int families = 0;
  std::vector<double> gbps;  // devices x devices: bottleneck a -> b, GB/s
  std::vector<LocalGroup> groups;

  double bw(int a, int b) const { return gbps[size_t(a * devices + b)]; }
  double both(int a, int b) const { return std::min(bw(a, b), bw(b, a)); }
};

PlacementCost localCost(const LocalProblem& p, const std::vector<int>& assign) {
  std::vector<double> worst(size_t(p.families), 0);
  PlacementCost c;
  std::vector<int> d;
  for (const LocalGroup& g : p.groups) {
    d.clear();
    for (int m : g.members) d.push_back(assign[size_t(m)]);
    std::sort(d.begin(), d.end());  // the simulator's ring order inside a host: device ids
    d.erase(std::unique(d.begin(), d.end()), d.end());
    if (d.size() < 2) continue;
    double gbps = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < d.size(); ++i) gbps = std::min(gbps, p.bw(d[i], d[(i + 1) % d.size()]));
    const double s = g.bytes / (gbps * 1e9);
    worst[size_t(g.family)] = std::max(worst[size_t(g.family)], s);
    c.groups_s += s;
  }
  for (double w : worst) c.families_s += w;
  return c;
}

// The free GPU best connected to every GPU of `chosen` (lowest id on ties);
// the lowest free one when nothing is chosen.
int bestFreeDevice(const LocalProblem& p, const std::vector<char>& used, const std::vector<int>& chosen) {
  int best = -1;
  double best_gbps = -1;
  for (int d = 0; d < p.devices; ++d) {
    if (used[size_t(d)]) continue;
    double g = std::numeric_limits<double>::infinity();
    for (int c : chosen) g = std::min(g, p.both(c, d));
    if (best < 0 || g > best_gbps) {
      best = d;
      best_gbps = g;
    }
  }
  return best;
}

// Groups in placement order, each onto the best-connected free GPUs.
std::vector<int> greedyLayout(const LocalProblem& p) {
  std::vector<int> assign(size_t(p.ranks), -1);
  std::vector<char> used(size_t(p.devices), 0);
  std::vector<size_t> order(p.groups.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const LocalGroup &x = p.groups[a], &y = p.groups[b];
    return x.tier != y.tier ? x.tier < y.tier : x.bytes > y.bytes;
  });
  for (size_t gi : order) {
    const LocalGroup& g = p.groups[gi];
    std::vector<int> chosen, todo, picked;
    for (int m : g.members) (assign[size_t(m)] >= 0 ? chosen.push_back(assign[size_t(m)]) : todo.push_back(m));
    if (todo.empty()) continue;
    if (chosen.empty() && todo.size() >= 2) {
      // Seed with the best-connected free pair.
      int sa = -1, sb = -1;
      double best = -1;
      for (int a = 0; a < p.devices; ++a)
        for (int b = a + 1; b < p.devices; ++b)
          if (!used[size_t(a)] && !used[size_t(b)] && p.both(a, b) > best) {
            best = p.both(a, b);
            sa = a;
            sb = b;
          }
      for (int d : {sa, sb}) {
        used[size_t(d)] = 1;
        chosen.push_back(d);
        picked.push_back(d);
      }
    }
    while (picked.size() < todo.size()) {
      const int d = bestFreeDevice(p, used, chosen);
      used[size_t(d)] = 1;
      chosen.push_back(d);
      picked.push_back(d);
    }
    std::sort(picked.begin(), picked.end());
    for (size_t i = 0; i < todo.size(); ++i) assign[size_t(todo[i])] = picked[i];
  }
  for (int r = 0; r < p.ranks; ++r)
    if (assign[size_t(r)] < 0) {
      const int d = bestFreeDevice(p, used, {});
      used[size_t(d)] = 1;
      assign[size_t(r)] = d;
    }
  return assign;
}

// Pairwise swaps of two GPUs' occupants (a rank and a free GPU included)
// while the cost falls. Each sweep evaluates every pair in full (no
// incremental cost): hosts of more GPUs than this keep the greedy layout.
constexpr int kMaxSwapDevices = 128;

void improveBySwaps(const LocalProblem& p, std::vector<int>& assign, int max_passes) {
  if (p.devices > kMaxSwapDevices) return;
  std::vector<int> owner(size_t(p.devices), -1);
  for (int r = 0; r < p.ranks; ++r) owner[size_t(assign[size_t(r)])] = r;
  PlacementCost best = localCost(p, assign);
  auto exchange = [&](int a, int b) {
    std::swap(owner[size_t(a)], owner[size_t(b)]);
    if (owner[size_t(a)] >= 0) assign[size_t(owner[size_t(a)])] = a;
    if (owner[size_t(b)] >= 0) assign[size_t(owner[size_t(b)])] = b;
  };
  for (int pass = 0; pass < max_passes; ++pass) {
    bool improved = false;
    for (int a = 0; a < p.devices; ++a)
      for (int b = a + 1; b < p.devices; ++b) {
        if (owner[size_t(a)] < 0 && owner[size_t(b)] < 0) continue;
        exchange(a, b);
        const PlacementCost c = localCost(p, assign);
        if (cheaper(c, best)) {
          best = c;
          improved = true;
        } else {
          exchange(a, b);
        }
      }
    if (!improved) break;
  }
}

// What makes two problems the same: sizes, links, GPU figures, local groups.
std::string signature(const LocalProblem& p, const Topology& topo, const std::vector<int>& devices) {
  std::string key = fmt::format("{} {}|", p.ranks, p.devices);
  for (double g : p.gbps) fmt::format_to(std::back_inserter(key), "{:.9g},", g);
  key += '|';
  for (int d : devices) {
    const DeviceSpec& s = topo.devices[size_t(d)];
    fmt::format_to(std::back_inserter(key), "{}/{}/{}/{},", s.model, s.bf16_flops, s.speed, s.mig_fraction);
  }
  key += '|';
  for (const LocalGroup& g : p.groups) {
    fmt::format_to(std::back_inserter(key), "{}:{}:{:.9g}:", g.family, g.tier, g.bytes);
    for (int m : g.members) fmt::format_to(std::back_inserter(key), "{},", m);
    key += ';';
  }
  return key;
}

}  // namespace

HostLayoutSolver::HostLayoutSolver(const Plan& plan, const Router& router, const std::vector<GroupTraffic>& traffic,
                                   int max_swap_passes)
    : plan_(plan),
      router_(router),
      traffic_(traffic),
      max_swap_passes_(max_swap_passes),
      traffic_of_rank_(size_t(plan.world_size)),
      local_index_(size_t(plan.world_size), -1) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < traffic_.size(); ++i) {
    auto [it, inserted] = index.try_emplace(traffic_[i].family, families_);
    if (inserted) ++families_;
    family_of_.push_back(it->second);
    for (int r : plan_.groups[size_t(traffic_[i].group)].ranks) traffic_of_rank_[size_t(r)].push_back(int(i));
  }
}

std::vector<int> HostLayoutSolver::solve(const std::vector<int>& block, const std::vector<int>& devices) {
  LocalProblem p;
  p.ranks = int(block.size());
  p.devices = int(devices.size());
  p.families = families_;
  p.gbps.assign(size_t(p.devices * p.devices), std::numeric_limits<double>::infinity());
  for (int a = 0; a < p.devices; ++a)
    for (int b = 0; b < p.devices; ++b)
      if (a != b) p.gbps[size_t(a * p.devices + b)] = router_.bottleneckGbps(devices[size_t(a)], devices[size_t(b)]);
  for (size_t i = 0; i < block.size(); ++i) local_index_[size_t(block[i])] = int(i);
  std::vector<int> entries;
  for (int r : block) entries.insert(entries.end(), traffic_of_rank_[size_t(r)].begin(), traffic_of_rank_[size_t(r)].end());
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  for (int e : entries) {
    LocalGroup g{family_of_[size_t(e)], traffic_[size_t(e)].tier, traffic_[size_t(e)].bytes, {}};
    for (int r : plan_.groups[size_t(traffic_[size_t(e)].group)].ranks)
      if (local_index_[size_t(r)] >= 0) g.members.push_back(local_index_[size_t(r)]);
    std::sort(g.members.begin(), g.members.end());
    if (g.members.size() >= 2) p.groups.push_back(std::move(g));
  }
  for (int r : block) local_index_[size_t(r)] = -1;

  const std::string key = signature(p, router_.topology(), devices);
  if (auto it = memo_.find(key); it != memo_.end()) {
    ++reused_;
    return it->second;
  }
  ++solved_;
  std::vector<int> identity(size_t(p.ranks));
  std::iota(identity.begin(), identity.end(), 0);
  // Swaps from the greedy layout and from the identity; the identity itself
  // unless one of them is strictly cheaper.
  std::vector<int> layout = identity;
  PlacementCost best = localCost(p, identity);
  for (std::vector<int> start : {greedyLayout(p), identity}) {
    improveBySwaps(p, start, max_swap_passes_);
    const PlacementCost c = localCost(p, start);
    if (cheaper(c, best)) {
      best = c;
      layout = std::move(start);
    }
  }
  memo_.emplace(key, layout);
  return layout;
}

}  // namespace tandem::sim
